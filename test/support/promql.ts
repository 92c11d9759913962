import { createMetrics } from '../../src/metrics.js';

/** PromQL's keywords and literals, which look like metric names to a tokenizer. */
const KEYWORDS = new Set([
  'and',
  'or',
  'unless',
  'bool',
  'offset',
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'inf',
  'nan',
]);

/**
 * The metric names a PromQL expression selects. Strings, label matchers, ranges and the label
 * lists of by/without/on/ignoring/group_* are dropped first; what is left that is not a keyword and
 * not followed by an opening parenthesis (a function or aggregation) is a metric name. Grafana's
 * variables ($__rate_interval, $__range) only appear inside ranges.
 */
export function metricNamesIn(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = new Set<string>();
  for (const m of bare.matchAll(/(?<![\w:.$])([a-zA-Z_:][\w:]*)(?![\w:]|\s*\()/g)) {
    if (!KEYWORDS.has(m[1]!.toLowerCase())) names.add(m[1]!);
  }
  return [...names].sort();
}

/**
 * Every series name the service's processes export: the families of the registry each process
 * builds (src/metrics.ts, prom-client's default metrics included), with the _bucket, _sum and
 * _count series of histograms and summaries.
 */
export async function exportedSeriesNames(): Promise<Set<string>> {
  const families = await createMetrics('test').registry.getMetricsAsJSON();
  const names = new Set<string>();
  for (const f of families) {
    const type = String(f.type);
    const suffixes =
      type === 'histogram' ? ['_bucket', '_sum', '_count'] : type === 'summary' ? ['', '_sum', '_count'] : [''];
    for (const s of suffixes) names.add(`${f.name}${s}`);
  }
  return names;
}
