import { api, type Session } from '../api.js';
import { CopyButton, Show, TableScroll, useLoad } from '../components.js';
import { count, usdCents, utcDateTime } from '../format.js';
import { snippets } from '../snippets.js';
import type { MonthUsage, SpendLimit, SubscriptionInfo, Window } from '../types.js';

const WINDOWS: [Window, string][] = [
  ['requests_per_minute', 'Requests this minute'],
  ['requests_per_hour', 'Requests this hour'],
  ['requests_per_day', 'Requests today'],
  ['tokens_per_day', 'Tokens today'],
];

export function OverviewPage(props: { session: Extract<Session, { signed_in: true }> }) {
  const info = useLoad(() => api<SubscriptionInfo>('/v1/subscription/info'), []);
  const usage = useLoad(() => api<MonthUsage>('/v1/billing/usage'), []);
  const baseUrl = `${window.location.origin}/v1`;
  return (
    <>
      <p>
        Signed in as {props.session.account.name} ({props.session.account.organization}).
      </p>
      <div class="cards">
        <section class="card" aria-labelledby="plan">
          <h2 id="plan">Plan</h2>
          <Show of={info} what="your plan">
            {(i) => (
              <>
                <p class="figure">{i.tier === 'paid' ? 'Paid' : 'Free'}</p>
                <p>
                  {i.tier === 'paid' ? 'Usage is billed monthly.' : 'Free, within the limits below.'}{' '}
                  <a href="/console/billing">{i.tier === 'paid' ? 'Manage billing' : 'Upgrade'}</a>
                </p>
              </>
            )}
          </Show>
        </section>
        <section class="card" aria-labelledby="month">
          <h2 id="month">This month</h2>
          <Show of={usage} what="this month's usage">
            {(u) => (
              <dl class="pairs">
                <dt>Spend</dt>
                <dd class="figure">{usdCents(u.total.cost_usd)}</dd>
                <dt>Tokens</dt>
                <dd>{count(u.total.total_tokens)}</dd>
                <dt>Requests</dt>
                <dd>{count(u.total.requests)}</dd>
              </dl>
            )}
          </Show>
          <a href="/console/usage">Usage by day</a>
        </section>
        <section class="card" aria-labelledby="limit">
          <h2 id="limit">Spending limit</h2>
          <Show of={usage} what="the spending limit">
            {(u) => <SpendGauge limit={u.spend_limit} tier={u.tier} />}
          </Show>
        </section>
      </div>

      <section aria-labelledby="windows">
        <h2 id="windows">What is left of your rate limits</h2>
        <Show of={info} what="your limits">
          {(i) =>
            i.limits.remaining ? (
              <TableScroll label="Rate limits">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Window</th>
                      <th scope="col" class="num">
                        Left
                      </th>
                      <th scope="col" class="num">
                        Limit
                      </th>
                      <th scope="col">Starts again</th>
                    </tr>
                  </thead>
                  <tbody>
                    {WINDOWS.map(([w, label]) => (
                      <tr key={w}>
                        <th scope="row">{label}</th>
                        <td class="num">{count(i.limits.remaining![w])}</td>
                        <td class="num">{count(i.limits[w])}</td>
                        <td>{i.limits.resets_at ? utcDateTime(i.limits.resets_at[w]) : '—'}</td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </TableScroll>
            ) : (
              <p class="muted">The counters cannot be read right now; try again in a moment.</p>
            )
          }
        </Show>
      </section>

      <section aria-labelledby="start">
        <h2 id="start">Make a request</h2>
        <p>
          Base URL: <code id="base-url">{baseUrl}</code> <CopyButton text={baseUrl} label="Copy base URL" />
        </p>
        <p>
          Put your key in <code>SVC_API_KEY</code> (lost it? <a href="/console/keys">make a new one</a>).
        </p>
        <Show of={info} what="your models">
          {(i) =>
            snippets(baseUrl, i.models[0]?.id ?? 'gpt-4.1-mini').map((s) => (
              <div class="snippet" key={s.id}>
                <h3 id={`snippet-${s.id}`}>{s.label}</h3>
                <pre tabIndex={0} aria-labelledby={`snippet-${s.id}`}>
                  <code>{s.code}</code>
                </pre>
                <CopyButton text={s.code} label={`Copy ${s.label} example`} />
              </div>
            ))
          }
        </Show>
      </section>
    </>
  );
}

/** The monthly limit as a gauge: spent plus what requests in flight hold, against the limit. */
export function SpendGauge(props: { limit: SpendLimit | undefined; tier: 'free' | 'paid' }) {
  const l = props.limit;
  if (!l || l.monthly_limit_usd === null)
    return (
      <p>
        No limit set.{' '}
        {props.tier === 'paid' ? (
          <a href="/console/billing#spend-limit">Set one</a>
        ) : (
          'Free-tier usage costs nothing; a limit applies on the paid tier.'
        )}
      </p>
    );
  const limit = Number(l.monthly_limit_usd);
  const used = Number(l.spent_usd) + Number(l.reserved_usd);
  const percent = limit > 0 ? Math.min(100, Math.round((used / limit) * 100)) : 100;
  return (
    <>
      <label for="spend-gauge" class="figure">
        {usdCents(l.spent_usd)} of {usdCents(l.monthly_limit_usd)}
      </label>
      <meter
        id="spend-gauge"
        min={0}
        max={limit}
        low={limit * 0.8}
        high={limit * 0.95}
        optimum={0}
        value={Math.min(used, limit)}
      >
        {percent}%
      </meter>
      <p class="muted">
        {percent}% used; {usdCents(l.remaining_usd)} left until {utcDateTime(l.resets_at)}.
      </p>
    </>
  );
}
