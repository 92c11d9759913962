import { useEffect, useRef, useState } from 'preact/hooks';
import { api, describeError } from '../api.js';
import { Notice, Show, TableScroll, useLoad } from '../components.js';
import {
  addDays,
  apiName,
  count,
  isoDay,
  isZeroAmount,
  percent,
  usd,
  usdChartValue,
  usdTicks,
  utcDateTime,
} from '../format.js';
import { navigate, useLocation } from '../router.js';
import type { Api, DailyUsage, KeyUsage, RequestRow } from '../types.js';
import { CachingSection } from './usage-caching.js';

const RANGES: [string, string][] = [
  ['month', 'This month'],
  ['last-month', 'Last month'],
  ['30d', 'Last 30 days'],
  ['90d', 'Last 90 days'],
  ['custom', 'Chosen dates'],
];

/** How the figures name a range's period, where it has a name (the others say their dates). */
const WHEN: Record<string, string> = { month: 'this month', 'last-month': 'last month' };

/** The period a range names, in UTC days (undefined: the service's default, this month). */
function period(range: string, query: URLSearchParams): { start?: string; end?: string } {
  const today = isoDay(new Date());
  const firstOfMonth = `${today.slice(0, 8)}01`;
  switch (range) {
    case 'last-month': {
      const end = addDays(firstOfMonth, -1);
      return { start: `${end.slice(0, 8)}01`, end };
    }
    case '30d':
      return { start: addDays(today, -29), end: today };
    case '90d':
      return { start: addDays(today, -89), end: today };
    case 'custom':
      return { start: query.get('start') ?? firstOfMonth, end: query.get('end') ?? today };
    default:
      return {};
  }
}

function daysBetween(start: string, end: string): string[] {
  const days: string[] = [];
  for (let d = start; d <= end && days.length < 400; d = addDays(d, 1)) days.push(d);
  return days;
}

/** The endpoint each API answers on. */
const PATHS: Record<Api, string> = {
  'chat.completions': 'POST /v1/chat/completions',
  responses: 'POST /v1/responses',
};

/** A path that a narrow card wraps after a slash, never inside a word. */
const breakableAtSlashes = (path: string) =>
  path.split('/').flatMap((part, i) => (i === 0 ? [part] : [<wbr key={i} />, `/${part}`]));

function toCsv(u: DailyUsage): string {
  // The cache and reasoning counts after the columns the CSV always had, so readers by position keep working.
  const lines = [
    'date,model,api,requests,prompt_tokens,completion_tokens,total_tokens,cost_usd,cached_tokens,cache_write_tokens,reasoning_tokens,cache_savings_usd',
  ];
  for (const r of u.data)
    lines.push(
      [
        r.date,
        JSON.stringify(r.model),
        r.api,
        r.requests,
        r.prompt_tokens,
        r.completion_tokens,
        r.total_tokens,
        r.cost_usd,
        r.cached_tokens,
        r.cache_write_tokens,
        r.reasoning_tokens,
        r.cache_savings_usd,
      ].join(','),
    );
  return `${lines.join('\n')}\n`;
}

function downloadCsv(u: DailyUsage): void {
  const url = URL.createObjectURL(new Blob([toCsv(u)], { type: 'text/csv' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = `usage-${u.start_date}-to-${u.end_date}.csv`;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export function UsagePage() {
  const { query } = useLocation();
  const range = query.get('range') ?? 'month';
  const { start, end } = period(range, query);
  const usage = useLoad(() => {
    const qs = new URLSearchParams({ group_by: 'api' });
    if (start) qs.set('start_date', start);
    if (end) qs.set('end_date', end);
    return api<DailyUsage>(`/v1/billing/usage/daily?${qs}`);
  }, [start, end]);

  const choose = (next: string, extra: Record<string, string> = {}) =>
    navigate(`/console/usage?${new URLSearchParams({ range: next, ...extra }).toString()}`, { replace: true });

  return (
    <>
      <form class="range" aria-label="Period" onSubmit={(e) => e.preventDefault()}>
        <label for="range">Period</label>
        <select id="range" value={range} onChange={(e) => choose((e.target as HTMLSelectElement).value)}>
          {RANGES.map(([v, label]) => (
            <option key={v} value={v}>
              {label}
            </option>
          ))}
        </select>
        {range === 'custom' && (
          <CustomDates start={start!} end={end!} onApply={(s, e) => choose('custom', { start: s, end: e })} />
        )}
      </form>
      <Show of={usage} what="usage">
        {(u) => <UsageView usage={u} when={WHEN[range]} />}
      </Show>
      <RecentRequests />
    </>
  );
}

function CustomDates(props: { start: string; end: string; onApply: (start: string, end: string) => void }) {
  const [start, setStart] = useState(props.start);
  const [end, setEnd] = useState(props.end);
  return (
    <>
      <label for="start">From</label>
      <input id="start" type="date" value={start} onInput={(e) => setStart((e.target as HTMLInputElement).value)} />
      <label for="end">To</label>
      <input id="end" type="date" value={end} onInput={(e) => setEnd((e.target as HTMLInputElement).value)} />
      <button type="button" onClick={() => props.onApply(start, end)}>
        Show
      </button>
    </>
  );
}

/** `when`: how the figures name the period ("this month"; its dates by default). */
function UsageView(props: { usage: DailyUsage; when?: string | undefined }) {
  const u = props.usage;
  const models = [...new Set(u.data.map((r) => r.model))].sort();
  const days = daysBetween(u.start_date, u.end_date);
  // A chart's value for a day and model sums its APIs' rows.
  const grid = (pick: (r: DailyUsage['data'][number]) => number) =>
    models.map((m) =>
      days.map((d) => u.data.filter((r) => r.model === m && r.date === d).reduce((sum, r) => sum + pick(r), 0)),
    );
  const period = `${u.start_date} to ${u.end_date} (UTC)`;
  if (u.data.length === 0)
    return (
      <Notice kind="info">
        No usage from {period}. Make a request with your key to <code>{PATHS['chat.completions']}</code> or{' '}
        <code>{PATHS.responses}</code> (the <a href="/console/">overview</a> has examples to copy) and it shows here
        within seconds, each API and each key apart.
      </Notice>
    );
  return (
    <>
      <p>
        {period}: <strong>{count(u.totals.total_tokens)}</strong> tokens, <strong>{count(u.totals.requests)}</strong>{' '}
        requests, <strong>{usd(u.totals.cost_usd)}</strong>.
      </p>
      <CachingSection usage={u} when={props.when ?? `from ${period}`} />
      <ApiSplit usage={u} />
      <KeySplit usage={u} />
      <section aria-labelledby="tokens-chart">
        <h2 id="tokens-chart">Tokens per day, by model</h2>
        <Chart
          label={`Tokens per day by model, ${period}; the table below has the numbers`}
          days={days}
          models={models}
          values={grid((r) => r.total_tokens)}
          format={(v) => count(Math.round(v))}
        />
      </section>
      <section aria-labelledby="cost-chart">
        <h2 id="cost-chart">Cost per day, by model</h2>
        {isZeroAmount(u.totals.cost_usd) ? (
          // An empty axis would say nothing; this says why it would be empty.
          <Notice kind="info">
            Costs are zero: every request from {period} cost $0.00. The free tier costs nothing; on the paid tier this
            chart shows what each model cost per day.
          </Notice>
        ) : (
          <Chart
            label={`Cost per day by model in USD, ${period}; the table below has the numbers`}
            days={days}
            models={models}
            values={grid((r) => Number(r.cost_usd))}
            format={usdChartValue}
            formatTicks={usdTicks}
          />
        )}
      </section>
      <section aria-labelledby="usage-table">
        <h2 id="usage-table">Per day, model and API</h2>
        <button type="button" onClick={() => downloadCsv(u)}>
          Download CSV
        </button>
        <TableScroll label="Usage per day, model and API">
          <table id="usage-numbers">
            <thead>
              <tr>
                <th scope="col">Day (UTC)</th>
                <th scope="col">Model</th>
                <th scope="col">API</th>
                <th scope="col" class="num">
                  Requests
                </th>
                <th scope="col" class="num">
                  Prompt tokens
                </th>
                <th scope="col" class="num">
                  Cached tokens
                </th>
                <th scope="col" class="num">
                  Completion tokens
                </th>
                <th scope="col" class="num">
                  Total tokens
                </th>
                <th scope="col" class="num">
                  Cost
                </th>
              </tr>
            </thead>
            <tbody>
              {u.data.map((r) => (
                <tr key={`${r.date} ${r.model} ${r.api}`}>
                  <td>{r.date}</td>
                  <td>{r.model}</td>
                  <td>{apiName(r.api)}</td>
                  <td class="num">{count(r.requests)}</td>
                  <td class="num">{count(r.prompt_tokens)}</td>
                  <td class="num">{count(r.cached_tokens)}</td>
                  <td class="num">{count(r.completion_tokens)}</td>
                  <td class="num">{count(r.total_tokens)}</td>
                  <td class="num">{usd(r.cost_usd)}</td>
                </tr>
              ))}
            </tbody>
            <tfoot>
              <tr class="totals">
                <th scope="row" colSpan={3}>
                  Total
                </th>
                <td class="num" data-total="requests">
                  {count(u.totals.requests)}
                </td>
                <td class="num" data-total="prompt_tokens">
                  {count(u.totals.prompt_tokens)}
                </td>
                <td class="num" data-total="cached_tokens">
                  {count(u.totals.cached_tokens)}
                </td>
                <td class="num" data-total="completion_tokens">
                  {count(u.totals.completion_tokens)}
                </td>
                <td class="num" data-total="total_tokens">
                  {count(u.totals.total_tokens)}
                </td>
                <td class="num" data-total="cost_usd">
                  {usd(u.totals.cost_usd)}
                </td>
              </tr>
            </tfoot>
          </table>
        </TableScroll>
      </section>
    </>
  );
}

/** Chat Completions and Responses side by side: each API's requests, tokens and cost over the period. */
function ApiSplit(props: { usage: DailyUsage }) {
  return (
    <section aria-labelledby="by-api">
      <h2 id="by-api">By API</h2>
      <div class="api-split">
        {props.usage.by_api.map(({ api, ...totals }) => (
          <section class="card" key={api} aria-labelledby={`api-${api.replace('.', '-')}`}>
            <h3 id={`api-${api.replace('.', '-')}`}>{apiName(api)}</h3>
            <code class="api-path">{breakableAtSlashes(PATHS[api])}</code>
            <dl class="api-figures">
              <div>
                <dt>Requests</dt>
                <dd data-api-total="requests">{count(totals.requests)}</dd>
              </div>
              <div>
                <dt>Tokens</dt>
                <dd data-api-total="total_tokens">{count(totals.total_tokens)}</dd>
              </div>
              <div>
                <dt>Cost</dt>
                <dd data-api-total="cost_usd">{usd(totals.cost_usd)}</dd>
              </div>
            </dl>
            {totals.requests === 0 && (
              <p class="muted api-none">None in this period: call the endpoint above with your key.</p>
            )}
          </section>
        ))}
      </div>
    </section>
  );
}

/** What a key's row is called: its name, or why it has none. */
const keyLabel = (k: { key_id: string | null; name: string | null }): string =>
  k.name ?? (k.key_id === null ? 'Before keys were recorded' : 'A deleted key');

/**
 * Each API key's requests, tokens and cost over the period, the costliest first, with a bar of its
 * share of the tokens (the percentage beside it says the same). Revoked keys stay, marked.
 */
function KeySplit(props: { usage: DailyUsage }) {
  const keys = props.usage.by_key;
  const total = props.usage.totals.total_tokens;
  const share = (k: KeyUsage) => (total > 0 ? (100 * k.total_tokens) / total : 0);
  return (
    <section aria-labelledby="by-key">
      <h2 id="by-key">By key</h2>
      {keys.length === 0 ? (
        <p class="muted">No key made a request in this period.</p>
      ) : (
        <TableScroll label="Usage per API key">
          <table id="usage-by-key" class="stack-on-phone" role="table">
            <thead role="rowgroup">
              <tr role="row">
                <th scope="col" role="columnheader">
                  Key
                </th>
                <th scope="col" role="columnheader">
                  Value
                </th>
                <th scope="col" role="columnheader" class="num">
                  Requests
                </th>
                <th scope="col" role="columnheader" class="num">
                  Tokens
                </th>
                <th scope="col" role="columnheader" class="num">
                  Cost
                </th>
                <th scope="col" role="columnheader">
                  Share of tokens
                </th>
              </tr>
            </thead>
            <tbody role="rowgroup">
              {keys.map((k) => (
                <tr key={k.key_id ?? 'none'} role="row" data-key-id={k.key_id ?? ''}>
                  <td role="cell" data-label="Key" data-field="name">
                    <span>
                      {keyLabel(k)}
                      {k.is_default && <span class="badge">Default</span>}
                      {k.revoked && <span class="badge badge-off">Revoked</span>}
                    </span>
                  </td>
                  <td role="cell" data-label="Value" data-field="value">
                    {k.redacted_value ? <code>{k.redacted_value}</code> : '—'}
                  </td>
                  <td role="cell" data-label="Requests" class="num" data-field="requests">
                    {count(k.requests)}
                  </td>
                  <td role="cell" data-label="Tokens" class="num" data-field="total_tokens">
                    {count(k.total_tokens)}
                  </td>
                  <td role="cell" data-label="Cost" class="num" data-field="cost_usd">
                    {usd(k.cost_usd)}
                  </td>
                  <td role="cell" data-label="Share of tokens" data-field="share">
                    <span class="share">
                      <span class="share-bar" aria-hidden="true">
                        <span class="share-fill" style={{ width: `${share(k)}%` }} />
                      </span>
                      <span class="share-value">{percent(k.total_tokens, total)}</span>
                    </span>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableScroll>
      )}
    </section>
  );
}

function Chart(props: {
  label: string;
  days: string[];
  models: string[];
  values: number[][];
  format: (v: number) => string;
  formatTicks?: (ticks: number[]) => string[];
}) {
  const box = useRef<HTMLDivElement>(null);
  const [failed, setFailed] = useState('');
  useEffect(() => {
    const target = box.current;
    if (!target) return;
    let chart: { destroy(): void; setSize(s: { width: number; height: number }): void } | undefined;
    let observer: ResizeObserver | undefined;
    let gone = false;
    import('../usage-chart.js').then(
      ({ drawStackedChart }) => {
        if (gone) return;
        chart = drawStackedChart(target, props, target.clientWidth);
        observer = new ResizeObserver(() => chart?.setSize({ width: target.clientWidth, height: 260 }));
        observer.observe(target);
      },
      (err: unknown) => setFailed(describeError(err)),
    );
    return () => {
      gone = true;
      observer?.disconnect();
      chart?.destroy();
    };
  }, [props.days.join(), props.models.join(), JSON.stringify(props.values)]);
  return (
    <>
      <div class="chart" ref={box} role="img" aria-label={props.label} />
      {failed && <Notice kind="error">The chart could not load: {failed}</Notice>}
    </>
  );
}

function RecentRequests() {
  // The cursors of the pages before this one, so "Newer" goes back without a cursor of its own.
  const [cursors, setCursors] = useState<string[]>([]);
  const after = cursors[cursors.length - 1];
  const page = useLoad(
    () =>
      api<{ data: RequestRow[]; has_more: boolean }>(
        `/v1/billing/requests?limit=20${after ? `&starting_after=${encodeURIComponent(after)}` : ''}`,
      ),
    [after],
  );
  return (
    <section aria-labelledby="recent">
      <h2 id="recent">Recent requests</h2>
      <Show of={page} what="recent requests">
        {(p) =>
          p.data.length === 0 && cursors.length === 0 ? (
            <p class="muted">No requests yet. They appear here about a second after each one ends.</p>
          ) : (
            <>
              <TableScroll label="Recent requests">
                <table id="recent-requests">
                  <thead>
                    <tr>
                      <th scope="col">Time (UTC)</th>
                      <th scope="col">Model</th>
                      <th scope="col">API</th>
                      <th scope="col">Key</th>
                      <th scope="col">Streamed</th>
                      <th scope="col">Outcome</th>
                      <th scope="col" class="num">
                        Tokens
                      </th>
                      <th scope="col" class="num">
                        Cached input
                      </th>
                      <th scope="col" class="num">
                        Cost
                      </th>
                      <th scope="col">Request id</th>
                    </tr>
                  </thead>
                  <tbody>
                    {p.data.map((r) => (
                      <tr key={r.id}>
                        <td>{utcDateTime(r.created)}</td>
                        <td>{r.model}</td>
                        <td>{apiName(r.api)}</td>
                        <td>{r.key_id === null ? '—' : keyLabel({ key_id: r.key_id, name: r.key_name })}</td>
                        <td>{r.stream ? 'yes' : 'no'}</td>
                        <td class={`outcome-${r.status}`}>{r.status}</td>
                        <td class="num">{count(r.total_tokens)}</td>
                        <td class="num" data-field="cached_tokens">
                          {count(r.cached_tokens)}
                        </td>
                        <td class="num">{usd(r.cost_usd)}</td>
                        <td>
                          <code>{r.id}</code>
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </TableScroll>
              <div class="actions">
                <button type="button" disabled={cursors.length === 0} onClick={() => setCursors((c) => c.slice(0, -1))}>
                  Newer
                </button>
                <button
                  type="button"
                  disabled={!p.has_more}
                  onClick={() => setCursors((c) => [...c, p.data[p.data.length - 1]!.id])}
                >
                  Older
                </button>
              </div>
            </>
          )
        }
      </Show>
    </section>
  );
}
