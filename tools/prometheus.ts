// @ts-expect-error: the parser ships no types; its output is described below.
import parsePrometheusTextFormat from "parse-prometheus-text-format";

interface Family {
  name: string;
  type: "COUNTER" | "GAUGE" | "HISTOGRAM" | "SUMMARY" | "UNTYPED";
}

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/**
 * A scrape of `GET /metrics`. The text is checked by an independent parser of the Prometheus
 * text format (a port of Prometheus' own, which throws on any malformed line) for its syntax and
 * metric types; samples are read line by line here, since that parser drops the labels of
 * labelled histograms.
 */
export class Scrape {
  readonly families: Family[];
  readonly samples: Sample[];

  constructor(readonly text: string) {
    this.families = parsePrometheusTextFormat(text) as Family[];
    this.samples = text
      .split("\n")
      .filter((line) => line !== "" && !line.startsWith("#"))
      .map((line) => {
        const match = SAMPLE.exec(line);
        if (!match) throw new Error(`not a sample line: ${line}`);
        const labels = Object.fromEntries([...(match[2] ?? "").matchAll(LABEL)].map((m) => [m[1], m[2]]));
        return { name: match[1] as string, labels, value: Number(match[3]) };
      });
  }

  /** Samples of a series name whose labels include `labels`. */
  find(name: string, labels: Record<string, string> = {}): Sample[] {
    return this.samples.filter(
      (s) => s.name === name && Object.entries(labels).every(([k, v]) => (s.labels[k] ?? "") === v),
    );
  }

  /** The value of the one sample of `name` with these labels (0 when there is none). */
  value(name: string, labels: Record<string, string> = {}): number {
    return this.find(name, labels).reduce((sum, s) => sum + s.value, 0);
  }

  /** A histogram series: its buckets by increasing `le`, its count and sum. */
  histogram(name: string, labels: Record<string, string>) {
    const buckets = this.find(`${name}_bucket`, labels).map(
      (s) => [s.labels.le === "+Inf" ? Number.POSITIVE_INFINITY : Number(s.labels.le), s.value] as const,
    );
    return {
      buckets: buckets.sort((a, b) => a[0] - b[0]),
      count: this.value(`${name}_count`, labels),
      sum: this.value(`${name}_sum`, labels),
    };
  }
}
