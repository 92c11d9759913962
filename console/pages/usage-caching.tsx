// The Usage page's prompt caching: how much of the period's input the providers served from their
// prompt caches, what that saved, and the same per model, from the figures of the daily usage.
import { TableScroll } from '../components.js';
import { addDecimals, compactCount, count, isNegativeAmount, isZeroAmount, percent, usd, usdCents } from '../format.js';
import type { DailyUsage, Figures } from '../types.js';

type CacheFigures = Pick<Figures, 'prompt_tokens' | 'cached_tokens' | 'cache_write_tokens' | 'cache_savings_usd'>;

/** The period's figures per model (its rows summed over days and APIs), most cached input first. */
function perModel(rows: DailyUsage['data']): (CacheFigures & { model: string })[] {
  const byModel = new Map<string, DailyUsage['data']>();
  for (const r of rows) byModel.set(r.model, [...(byModel.get(r.model) ?? []), r]);
  return [...byModel]
    .map(([model, rs]) => ({
      model,
      prompt_tokens: rs.reduce((s, r) => s + r.prompt_tokens, 0),
      cached_tokens: rs.reduce((s, r) => s + r.cached_tokens, 0),
      cache_write_tokens: rs.reduce((s, r) => s + r.cache_write_tokens, 0),
      cache_savings_usd: addDecimals(rs.map((r) => r.cache_savings_usd)),
    }))
    .filter((m) => m.prompt_tokens > 0)
    .sort((a, b) => b.cached_tokens - a.cached_tokens || a.model.localeCompare(b.model));
}

/** A prompt's three parts: read from the cache, written to it, and the rest at the input price. */
function parts(f: CacheFigures) {
  const plain = Math.max(0, f.prompt_tokens - f.cached_tokens - f.cache_write_tokens);
  return [
    { key: 'cached', label: 'Cached', tokens: f.cached_tokens },
    { key: 'written', label: 'Written to the cache', tokens: f.cache_write_tokens },
    { key: 'plain', label: 'At the input price', tokens: plain },
  ].filter((p) => p.key !== 'written' || p.tokens > 0);
}

/** A bar's exact width (the percentages beside it are rounded, and need not add up to 100). */
const widthOf = (part: number, whole: number): string => `${whole > 0 ? (100 * part) / whole : 0}%`;

/** `when`: "this month", or the period's dates, as the rest of the page names them. */
export function CachingSection(props: { usage: DailyUsage; when: string }) {
  const totals = props.usage.totals;
  const cached = totals.cached_tokens;
  const written = totals.cache_write_tokens;
  return (
    <section aria-labelledby="caching">
      <h2 id="caching">Prompt caching</h2>
      {cached === 0 && written === 0 ? (
        <NoCaching when={props.when} />
      ) : (
        <>
          <CacheSummary totals={totals} when={props.when} />
          <h3 id="cache-models">Per model</h3>
          <CacheByModel models={perModel(props.usage.data)} withWrites={written > 0} />
        </>
      )}
    </section>
  );
}

/** How caching comes about, for a period none of whose input was cached. */
function NoCaching(props: { when: string }) {
  return (
    <div class="card" id="caching-none">
      <p>
        None of the input {props.when} came from a prompt cache. Cached input is billed at each model's cached-input
        price (a tenth of the input price or less; see <a href="/console/models">Models</a>), so a long prompt sent
        again costs far less.
      </p>
      <ul>
        <li>
          OpenAI and Gemini models, and the built-in local model, cache by themselves: a prompt of{' '}
          <strong>1,024 tokens or more</strong> that begins the same way as one sent within the last few minutes is
          served from the cache.
        </li>
        <li>
          Anthropic models cache only what a request marks with <code>cache_control</code> (on a message, a content part
          or a tool), for 5 minutes, or an hour with <code>"ttl": "1h"</code>; writing to the cache costs more than
          input, reading from it a tenth.
        </li>
        <li>Put what stays the same first: the system prompt, the tools, then the conversation so far.</li>
      </ul>
    </div>
  );
}

function CacheSummary(props: { totals: Figures; when: string }) {
  const t = props.totals;
  const cached = t.cached_tokens;
  const share = percent(cached, t.prompt_tokens);
  const shown = parts(t);
  return (
    <div class="card cache-summary">
      <div class="cache-input">
        <p class="cache-headline" id="cache-headline">
          {/* Read out once, exactly; the short form is for the eye. */}
          <span aria-hidden="true">
            <span class="nowrap">
              <strong>{compactCount(t.prompt_tokens)}</strong> input
            </span>{' '}
            ·{' '}
            <span class="nowrap">
              <strong>{compactCount(cached)}</strong> cached ({share})
            </span>
          </span>
          <span class="sr-only">
            {count(t.prompt_tokens)} input tokens {props.when}, of which {count(cached)} cached ({share})
          </span>
        </p>
        <span class="input-bar" aria-hidden="true">
          {shown.map((p) => (
            <span
              key={p.key}
              class={`input-part input-${p.key}`}
              style={{ width: widthOf(p.tokens, t.prompt_tokens) }}
            />
          ))}
        </span>
        <ul class="input-legend" aria-label="Input tokens by part">
          {shown.map((p) => (
            <li key={p.key} data-part={p.key}>
              <span class={`swatch input-${p.key}`} aria-hidden="true" />
              <span>
                {p.label}: <span class="num">{count(p.tokens)}</span> ({percent(p.tokens, t.prompt_tokens)})
              </span>
            </li>
          ))}
        </ul>
      </div>
      <Savings amount={t.cache_savings_usd} costUsd={t.cost_usd} when={props.when} />
    </div>
  );
}

/** At a glance, to the cent; an amount under half a cent says so rather than "$0.00". */
const glance = (amount: string): string => {
  const abs = amount.replace(/^-/, '');
  return !isZeroAmount(abs) && usdCents(abs) === '$0.00' ? 'less than $0.01' : usdCents(abs);
};

/** What caching saved; said plainly when cache writes cost more than the reads saved. */
function Savings(props: { amount: string; costUsd: string; when: string }) {
  const { amount } = props;
  if (isZeroAmount(amount) && isZeroAmount(props.costUsd))
    return (
      <p class="cache-savings" id="cache-savings" data-savings="free">
        Nothing to save {props.when}: free-tier requests cost nothing. On the paid tier cached input is billed at each
        model's cached-input price (<a href="/console/models">Models</a>).
      </p>
    );
  if (isNegativeAmount(amount))
    return (
      <div class="cache-savings" id="cache-savings" data-savings="negative">
        <dl>
          <dt>Caching cost more than it saved {props.when}</dt>
          <dd class="figure" data-usd={amount}>
            {glance(amount)} more
          </dd>
        </dl>
        <p>
          Writing a prompt to the cache is billed above the input price (Anthropic: 1.25× for 5 minutes, 2× for an
          hour), and too little of what was written was read back before it expired to make up for it. A write pays off
          when the same prompt beginning comes again within its time.
        </p>
      </div>
    );
  return (
    <div class="cache-savings" id="cache-savings" data-savings="saved">
      <dl>
        <dt>Saved by caching {props.when}</dt>
        <dd class="figure" data-usd={amount}>
          {glance(amount)}
        </dd>
      </dl>
      <p class="muted">What this input would have cost at the input price, less what it cost (paid tier).</p>
    </div>
  );
}

function CacheByModel(props: { models: (CacheFigures & { model: string })[]; withWrites: boolean }) {
  return (
    <TableScroll label="Prompt caching per model">
      <table id="cache-by-model" class="stack-on-phone" role="table">
        <thead role="rowgroup">
          <tr role="row">
            <th scope="col" role="columnheader">
              Model
            </th>
            <th scope="col" role="columnheader" class="num">
              Input tokens
            </th>
            <th scope="col" role="columnheader" class="num">
              Cached
            </th>
            <th scope="col" role="columnheader">
              Share cached
            </th>
            {props.withWrites && (
              <th scope="col" role="columnheader" class="num">
                Written to the cache
              </th>
            )}
            <th scope="col" role="columnheader" class="num">
              Saved
            </th>
          </tr>
        </thead>
        <tbody role="rowgroup">
          {props.models.map((m) => (
            <tr key={m.model} role="row" data-model={m.model}>
              <td role="cell" data-label="Model" data-field="model">
                {m.model}
              </td>
              <td role="cell" data-label="Input tokens" class="num" data-field="prompt_tokens">
                {count(m.prompt_tokens)}
              </td>
              <td role="cell" data-label="Cached" class="num" data-field="cached_tokens">
                {count(m.cached_tokens)}
              </td>
              <td role="cell" data-label="Share cached" data-field="share">
                <span class="share">
                  <span class="share-bar" aria-hidden="true">
                    <span
                      class="share-fill input-cached"
                      style={{ width: widthOf(m.cached_tokens, m.prompt_tokens) }}
                    />
                  </span>
                  <span class="share-value">{percent(m.cached_tokens, m.prompt_tokens)}</span>
                </span>
              </td>
              {props.withWrites && (
                <td role="cell" data-label="Written to the cache" class="num" data-field="cache_write_tokens">
                  {count(m.cache_write_tokens)}
                </td>
              )}
              <td role="cell" data-label="Saved" class="num" data-field="cache_savings_usd">
                {usd(m.cache_savings_usd)}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </TableScroll>
  );
}
