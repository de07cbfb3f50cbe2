/**
 * API.md v1.4 "Webhook URLs": the address ranges a webhook `url` may not name as its host. The host
 * checked is the one the WHATWG URL parser wrote (`new URL(url).hostname`), which is the one fetched:
 * it has already turned every IPv4 form it accepts (decimal `167772161`, hex `0xa000001` or
 * `0x0a.0.0.1`, octal `012.0.0.1`, short `10.1`, percent-escaped) into dotted decimal, and writes
 * IPv6 in brackets, compressed, in lower case, with an embedded IPv4 in hex (`[::ffff:a00:1]`). So
 * each address has one spelling here, and the ranges are compared as numbers.
 */

/** IPv4 ranges refused: [first octets as a number, prefix length, name]. */
const IPV4_RANGES: readonly (readonly [number, number, string])[] = [
  [0x0a000000, 8, "10.0.0.0/8"],
  [0xac100000, 12, "172.16.0.0/12"],
  [0xc0a80000, 16, "192.168.0.0/16"],
  [0x64400000, 10, "100.64.0.0/10"],
  [0x7f000000, 8, "127.0.0.0/8"],
  [0xa9fe0000, 16, "169.254.0.0/16"],
  [0x00000000, 8, "0.0.0.0/8"],
];

const DOTTED = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

/** The IPv4 address as a 32-bit number, or null when the text is not dotted decimal. */
function ipv4(text: string): number | null {
  const m = DOTTED.exec(text);
  if (!m) return null;
  const octets = m.slice(1).map(Number);
  if (octets.some((o) => o > 255)) return null;
  return octets.reduce((n, o) => n * 256 + o, 0);
}

function ipv4Range(address: number): string | null {
  for (const [base, bits, name] of IPV4_RANGES) {
    if (Math.floor(address / 2 ** (32 - bits)) === Math.floor(base / 2 ** (32 - bits))) return name;
  }
  return null;
}

/** The eight 16-bit groups of an IPv6 address (an embedded dotted IPv4 taken as two), or null. */
function ipv6(text: string): number[] | null {
  let body = text.toLowerCase();
  const dotted = /(\d{1,3}(?:\.\d{1,3}){3})$/.exec(body);
  let tail: number[] = [];
  if (dotted?.[1]) {
    const v4 = ipv4(dotted[1]);
    if (v4 === null) return null;
    tail = [Math.floor(v4 / 65_536), v4 % 65_536];
    body = body.slice(0, -dotted[1].length);
    if (!body.endsWith(":")) return null;
    if (!body.endsWith("::")) body = body.slice(0, -1); // "…:ffff:" → "…:ffff"; "::" stays
  }
  const halves = body.split("::");
  if (halves.length > 2) return null;
  const parse = (part: string) =>
    part === "" ? [] : part.split(":").map((g) => (/^[0-9a-f]{1,4}$/.test(g) ? Number.parseInt(g, 16) : Number.NaN));
  const head = parse(halves[0] ?? "");
  const rest = halves.length === 2 ? parse(halves[1] ?? "") : [];
  const given = head.length + rest.length + tail.length;
  if (head.some(Number.isNaN) || rest.some(Number.isNaN)) return null;
  if (halves.length === 1 && given !== 8) return null;
  if (halves.length === 2 && given > 7) return null;
  return [...head, ...Array<number>(8 - given).fill(0), ...rest, ...tail];
}

function ipv6Range(groups: number[]): string | null {
  const [g0 = 0, g1 = 0, g2 = 0, g3 = 0, g4 = 0, g5 = 0, g6 = 0, g7 = 0] = groups;
  const zeroTo = (n: number) => groups.slice(0, n).every((g) => g === 0);
  if (zeroTo(7) && g7 === 1) return "::1";
  if (zeroTo(8)) return "::";
  if ((g0 & 0xfe00) === 0xfc00) return "fc00::/7";
  if ((g0 & 0xffc0) === 0xfe80) return "fe80::/10";
  // IPv4-mapped (::ffff:0:0/96): the IPv4 address it stands for decides.
  if (g0 === 0 && g1 === 0 && g2 === 0 && g3 === 0 && g4 === 0 && g5 === 0xffff) return ipv4Range(g6 * 65_536 + g7);
  return null;
}

/**
 * The refused range a URL's host (as `URL.hostname` writes it) lies in, named as API.md names it
 * (`10.0.0.0/8`, `::1`, `fc00::/7`, …), or null for any other host: a public address, or a name.
 */
export function refusedAddress(hostname: string): string | null {
  const host = hostname.endsWith(".") ? hostname.slice(0, -1) : hostname;
  if (host.startsWith("[") && host.endsWith("]")) {
    const groups = ipv6(host.slice(1, -1));
    return groups ? ipv6Range(groups) : null;
  }
  const v4 = ipv4(host);
  return v4 === null ? null : ipv4Range(v4);
}
