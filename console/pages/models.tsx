import { api, type Session } from '../api.js';
import { Show, TableScroll, useLoad } from '../components.js';
import { addDecimals, count, isZeroAmount, usd } from '../format.js';
import type { Model, ModelList, TierPrice } from '../types.js';

/** "Text, images; tools; reasoning effort": what a request to the model may carry. */
function accepts(m: Model): string {
  const parts = [m.input_modalities.includes('image') ? 'Text, images' : 'Text'];
  if (m.supports_tools) parts.push('tools');
  if (m.reasoning) parts.push('reasoning effort');
  return parts.join('; ');
}

const perMillion = (price: string | undefined): string => (price === undefined ? '—' : usd(price));

/** Two exact decimal prices equal ("1.25" and "1.250"), without a float. */
const samePrice = (a: string, b: string): boolean => isZeroAmount(addDecimals([a, `-${b}`]));

/**
 * What writing a prompt part to the cache costs, by how long it stays (Anthropic's 5 minutes and 1
 * hour); "As input" where a write costs the input price, as with providers that cache by themselves.
 */
function CacheWrites(props: { price: TierPrice | undefined }) {
  const p = props.price;
  if (!p) return <>—</>;
  const writes = [
    { ttl: '5 minutes', price: p.cache_write_price_per_million },
    { ttl: '1 hour', price: p.cache_write_1h_price_per_million },
  ];
  if (writes.every((w) => w.price === undefined || samePrice(w.price, p.input_price_per_million)))
    return <span class="muted">As input</span>;
  return (
    <span class="write-prices">
      {writes.map((w) => (
        <span key={w.ttl} data-ttl={w.ttl}>
          {perMillion(w.price)} <span class="muted">{w.ttl}</span>
        </span>
      ))}
    </span>
  );
}

/**
 * The models as a table (one block of labelled lines per model on a phone): context length, what
 * each accepts, and its price per 1M tokens on each tier.
 */
function ModelTable(props: { id: string; label: string; models: Model[] }) {
  return (
    <TableScroll label={props.label}>
      <table id={props.id} class="stack-on-phone models" role="table">
        <thead role="rowgroup">
          <tr role="row">
            <th scope="col" role="columnheader">
              Model
            </th>
            <th scope="col" role="columnheader" class="num">
              Context (tokens)
            </th>
            <th scope="col" role="columnheader">
              Accepts
            </th>
            <th scope="col" role="columnheader">
              Free tier
            </th>
            <th scope="col" role="columnheader" class="num">
              Paid: input
            </th>
            <th scope="col" role="columnheader" class="num">
              Paid: cached input
            </th>
            <th scope="col" role="columnheader" class="num">
              Paid: cache writes
            </th>
            <th scope="col" role="columnheader" class="num">
              Paid: output
            </th>
          </tr>
        </thead>
        <tbody role="rowgroup">
          {props.models.map((m) => (
            <tr key={m.id} role="row" data-model={m.id}>
              <td role="cell" data-label="Model" class="model-name">
                <span>
                  <code>{m.id}</code> <span class="muted">({m.owned_by})</span>
                </span>
              </td>
              <td role="cell" data-label="Context (tokens)" class="num" data-field="context">
                {m.context_length === null ? 'Not stated' : count(m.context_length)}
              </td>
              <td role="cell" data-label="Accepts" data-field="accepts">
                {accepts(m)}
              </td>
              <td role="cell" data-label="Free tier" data-field="free">
                {m.pricing.free ? 'Free' : 'Paid tier only'}
              </td>
              <td role="cell" data-label="Paid: input" class="num" data-field="paid-input">
                {perMillion(m.pricing.paid?.input_price_per_million)}
              </td>
              <td role="cell" data-label="Paid: cached input" class="num" data-field="paid-cached-input">
                {perMillion(m.pricing.paid?.cached_input_price_per_million)}
              </td>
              <td role="cell" data-label="Paid: cache writes" class="num" data-field="paid-cache-writes">
                <CacheWrites price={m.pricing.paid} />
              </td>
              <td role="cell" data-label="Paid: output" class="num" data-field="paid-output">
                {perMillion(m.pricing.paid?.output_price_per_million)}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </TableScroll>
  );
}

export function ModelsPage(props: { session: Extract<Session, { signed_in: true }> }) {
  const free = props.session.account.tier === 'free';
  // Both lists, so what the paid tier adds is read from the answers, not from a tier this page
  // learnt when it loaded (an upgrade with a card on file happens without a page load).
  const lists = useLoad(() => Promise.all([api<ModelList>('/v1/models'), api<ModelList>('/v1/models?tier=paid')]), []);
  return (
    <>
      <p>
        Prices are in US dollars per million tokens: input is the prompt, output the completion. Cached input is the
        part of a prompt the provider served from its prompt cache. Anthropic models cache what a request marks with{' '}
        <code>cache_control</code> and bill the write above the input price, by how long it is kept: 5 minutes, or an
        hour with <code>"ttl": "1h"</code>; the other models cache long prompts by themselves, a write at the input
        price.{' '}
        {free ? (
          <>
            On the free tier your models cost nothing, within its <a href="/console/">rate limits</a>.
          </>
        ) : (
          'Your account is on the paid tier: usage is billed monthly at these prices.'
        )}
      </p>
      <Show of={lists} what="the models">
        {([mine, paid]) => {
          const yours = new Set(mine.data.map((m) => m.id));
          const more = paid.data.filter((m) => !yours.has(m.id));
          return (
            <>
              <section aria-labelledby="your-models">
                <h2 id="your-models">Your models</h2>
                {mine.data.length === 0 ? (
                  <p class="muted">No models are available to your tier on this service. Ask its operator.</p>
                ) : (
                  <ModelTable id="model-list" label="Your models" models={mine.data} />
                )}
              </section>
              {more.length > 0 && (
                <section aria-labelledby="paid-models">
                  <h2 id="paid-models">With the paid tier</h2>
                  <p>
                    The paid tier adds {more.length} more model{more.length === 1 ? '' : 's'} and higher rate limits.{' '}
                    <a href="/console/billing">Upgrade on the billing page</a>.
                  </p>
                  <ModelTable id="paid-model-list" label="Paid-tier models" models={more} />
                </section>
              )}
            </>
          );
        }}
      </Show>
      <p class="muted">
        <code>GET /v1/models</code> lists the same models, with these figures, for any client (
        <a href="/docs">API documentation</a>).
      </p>
    </>
  );
}

/** The paid tier's prices, short, for the billing page before upgrading. */
export function PaidTierPrices() {
  const paid = useLoad(() => api<ModelList>('/v1/models?tier=paid'), []);
  return (
    <section aria-labelledby="paid-prices" class="narrow">
      <h2 id="paid-prices">Paid-tier prices</h2>
      <Show of={paid} what="the paid tier's prices">
        {(list) => (
          <>
            <TableScroll label="Paid-tier prices">
              <table id="paid-prices-list">
                <thead>
                  <tr>
                    <th scope="col">Model</th>
                    <th scope="col" class="num">
                      Input
                    </th>
                    <th scope="col" class="num">
                      Output
                    </th>
                  </tr>
                </thead>
                <tbody>
                  {list.data.map((m) => (
                    <tr key={m.id}>
                      <th scope="row">
                        <code>{m.id}</code>
                      </th>
                      <td class="num">{perMillion(m.pricing.paid?.input_price_per_million)}</td>
                      <td class="num">{perMillion(m.pricing.paid?.output_price_per_million)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </TableScroll>
            <p class="muted">
              US dollars per million tokens, billed monthly. Context lengths and what each model accepts are on the{' '}
              <a href="/console/models">Models page</a>.
            </p>
          </>
        )}
      </Show>
    </section>
  );
}
