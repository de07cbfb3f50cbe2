import { describe, expect, it } from "vitest";
import { endpointUrl } from "../src/handoff/endpoints";
import { refusedAddress } from "../src/handoff/webhook-address";

/**
 * API.md v1.4 "Webhook URLs" (issue #50): a webhook `url` whose host is an IP literal in a private,
 * loopback, link-local, shared, unique-local or unspecified range is refused, in every form the URL
 * parser writes as that address (decimal, hex and octal IPv4, IPv4-mapped IPv6), except `127.0.0.1`
 * and `localhost` over `http://` where WEBHOOK_ALLOW_HTTP_LOCALHOST allows them.
 */

const REFUSED: [url: string, range: string][] = [
  ["https://10.0.0.1/hook", "10.0.0.0/8"],
  ["https://10.255.255.255/", "10.0.0.0/8"],
  ["https://172.16.0.1/", "172.16.0.0/12"],
  ["https://172.31.255.254/", "172.16.0.0/12"],
  ["https://192.168.1.1/", "192.168.0.0/16"],
  ["https://100.64.0.1/", "100.64.0.0/10"],
  ["https://100.127.255.255/", "100.64.0.0/10"],
  ["https://127.0.0.1/", "127.0.0.0/8"],
  ["https://127.255.0.9/", "127.0.0.0/8"],
  ["https://169.254.169.254/latest/meta-data/", "169.254.0.0/16"],
  ["https://0.0.0.0/", "0.0.0.0/8"],
  ["https://0.1.2.3/", "0.0.0.0/8"],
  // What the URL parser normalizes to one of those: decimal, hex, octal, short forms, escapes.
  ["https://167772161/", "10.0.0.0/8"],
  ["https://0xa000001/", "10.0.0.0/8"],
  ["https://0x0a.0.0.1/", "10.0.0.0/8"],
  ["https://012.0.0.1/", "10.0.0.0/8"],
  ["https://10.1/", "10.0.0.0/8"],
  ["https://127.1/", "127.0.0.0/8"],
  ["https://0/", "0.0.0.0/8"],
  ["https://2852039166/", "169.254.0.0/16"],
  ["https://0xA9.0xFE.0xA9.0xFE/", "169.254.0.0/16"],
  ["https://%31%30.0.0.1/", "10.0.0.0/8"],
  ["https://127.0.0.1./", "127.0.0.0/8"],
  // IPv6.
  ["https://[::1]/", "::1"],
  ["https://[0:0:0:0:0:0:0:1]/", "::1"],
  ["https://[::]/", "::"],
  ["https://[fc00::1]/", "fc00::/7"],
  ["https://[fdff:ffff::1]/", "fc00::/7"],
  ["https://[fe80::1]/", "fe80::/10"],
  ["https://[FEBF::abcd]/", "fe80::/10"],
  // IPv4-mapped forms.
  ["https://[::ffff:10.0.0.1]/", "10.0.0.0/8"],
  ["https://[::ffff:a00:1]/", "10.0.0.0/8"],
  ["https://[0:0:0:0:0:ffff:a00:1]/", "10.0.0.0/8"],
  ["https://[::ffff:169.254.169.254]/", "169.254.0.0/16"],
  ["https://[::ffff:7f00:1]/", "127.0.0.0/8"],
  ["https://[::ffff:c0a8:101]/", "192.168.0.0/16"],
  ["https://[::ffff:0.0.0.0]/", "0.0.0.0/8"],
];

const ACCEPTED = [
  "https://example.com/hook",
  "https://1.1.1.1/",
  "https://9.255.255.255/",
  "https://11.0.0.1/",
  "https://172.15.255.255/",
  "https://172.32.0.1/",
  "https://192.167.1.1/",
  "https://192.169.0.1/",
  "https://100.63.255.255/",
  "https://100.128.0.1/",
  "https://169.253.0.1/",
  "https://169.255.0.1/",
  "https://128.0.0.1/",
  "https://[2001:db8::1]/",
  "https://[2606:4700:4700::1111]/",
  "https://[fec0::1]/",
  "https://[fbff::1]/",
  "https://[::2]/",
  "https://[::ffff:8.8.8.8]/",
  "https://[::ffff:1:a00:1]/",
  "https://10.0.0.1.nip.io/",
  "https://localhost/",
];

describe("webhook URL addresses (API.md v1.4 Webhook URLs)", () => {
  it.each(REFUSED)("refuses %s (%s)", (url, range) => {
    expect(refusedAddress(new URL(url).hostname)).toBe(range);
    const checked = endpointUrl(url, true);
    expect("problem" in checked && checked.problem).toContain(range);
  });

  it.each(ACCEPTED)("accepts %s", (url) => {
    expect(refusedAddress(new URL(url).hostname)).toBeNull();
    expect(endpointUrl(url, true)).toEqual({ href: new URL(url).href });
  });

  it("lets http://127.0.0.1 and http://localhost through only where WEBHOOK_ALLOW_HTTP_LOCALHOST allows them", () => {
    for (const url of ["http://127.0.0.1:9/hook", "http://localhost:9/hook"]) {
      expect(endpointUrl(url, true)).toEqual({ href: url });
      const off = endpointUrl(url, false);
      expect("problem" in off && off.problem).toContain("WEBHOOK_ALLOW_HTTP_LOCALHOST");
    }
    for (const url of ["http://10.0.0.1/", "http://[::1]/", "http://127.0.0.2/", "http://example.com/"]) {
      expect("problem" in endpointUrl(url, true), url).toBe(true);
    }
  });
});
