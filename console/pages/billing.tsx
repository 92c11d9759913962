import { useEffect, useState } from 'preact/hooks';
import { api, apiCall, describeError, isBillingOff, type Session } from '../api.js';
import { ConfirmDialog, Notice, Show, TableScroll, useLoad } from '../components.js';
import { count, usd, usdCents, utcDate, utcDateTime } from '../format.js';
import { navigate, useLocation } from '../router.js';
import type { History, SpendLimit, SubscriptionInfo, SubscriptionResult } from '../types.js';
import { PaidTierPrices } from './models.js';
import { SpendGauge } from './overview.js';

/** What the checkout returns' query string means, in words. */
function returnMessage(query: URLSearchParams): { kind: 'ok' | 'info' | 'error'; text: string } | undefined {
  const reason = query.get('reason');
  switch (query.get('upgrade') ?? `card-${query.get('card')}`) {
    case 'done':
      return { kind: 'ok', text: 'You are on the paid tier now. Usage is invoiced monthly.' };
    case 'cancelled':
      return { kind: 'info', text: 'Checkout cancelled: nothing was changed.' };
    case 'failed':
      return {
        kind: 'error',
        text: `The upgrade could not be completed${reason ? ` (${reason})` : ''}. Nothing was charged.`,
      };
    case 'card-updated':
      return { kind: 'ok', text: 'Your new card is the default for future invoices.' };
    case 'card-cancelled':
      return { kind: 'info', text: 'Card change cancelled: the card on file is unchanged.' };
    case 'card-failed':
      return { kind: 'error', text: `The card could not be changed${reason ? ` (${reason})` : ''}.` };
    default:
      return undefined;
  }
}

const BILLING_OFF =
  'Billing is not configured on this service: upgrades, card changes and invoices are unavailable. The free tier works as usual.';

export function BillingPage(props: { session: Extract<Session, { signed_in: true }> }) {
  const { query } = useLocation();
  const [returned] = useState(() => returnMessage(query));
  const [message, setMessage] = useState<{ kind: 'ok' | 'info' | 'error'; text: string }>();
  const [billingOff, setBillingOff] = useState(props.session.billing_configured === false);
  const [confirmDowngrade, setConfirmDowngrade] = useState(false);
  const [busy, setBusy] = useState(false);
  const info = useLoad(() => api<SubscriptionInfo>('/v1/subscription/info'), []);
  const history = useLoad(() => api<History>('/v1/billing/history'), []);

  // The message is read once; the address bar drops the query so a reload does not repeat it.
  useEffect(() => {
    if (returned) navigate('/console/billing', { replace: true });
  }, []);

  const act = async (what: () => Promise<void>) => {
    setBusy(true);
    setMessage(undefined);
    try {
      await what();
    } catch (err) {
      if (isBillingOff(err)) setBillingOff(true);
      else setMessage({ kind: 'error', text: describeError(err) });
    } finally {
      setBusy(false);
    }
  };

  const upgrade = () =>
    act(async () => {
      const r = (await apiCall<SubscriptionResult>('POST', '/v1/subscription/upgrade')).body;
      if (r.status === 'checkout_required' && r.checkout_url) {
        setMessage({ kind: 'info', text: 'Opening the secure checkout page…' });
        window.location.assign(r.checkout_url);
        return;
      }
      setMessage({ kind: 'ok', text: r.message });
      info.reload();
    });

  const changeCard = () =>
    act(async () => {
      const r = (await apiCall<{ checkout_url: string }>('POST', '/v1/subscription/payment-method-checkout')).body;
      setMessage({ kind: 'info', text: 'Opening the secure checkout page…' });
      window.location.assign(r.checkout_url);
    });

  const downgrade = () =>
    act(async () => {
      const r = (await apiCall<SubscriptionResult>('POST', '/v1/subscription/downgrade')).body;
      setMessage({ kind: 'ok', text: r.message });
      info.reload();
    });

  return (
    <>
      {returned && <Notice kind={returned.kind}>{returned.text}</Notice>}
      {billingOff && <Notice kind="info">{BILLING_OFF}</Notice>}
      {message && <Notice kind={message.kind}>{message.text}</Notice>}
      <section aria-labelledby="plan" class="card">
        <h2 id="plan">Plan</h2>
        <Show of={info} what="your plan">
          {(i) => (
            <>
              <dl class="pairs">
                <dt>Tier</dt>
                <dd id="tier">{i.tier === 'paid' ? 'Paid' : 'Free'}</dd>
                {i.subscription_status && (
                  <>
                    <dt>Subscription</dt>
                    <dd>{i.subscription_status}</dd>
                  </>
                )}
                <dt>Card</dt>
                <dd>
                  {i.payment_method?.last4
                    ? `${i.payment_method.brand ?? 'Card'} ending ${i.payment_method.last4}`
                    : 'None on file'}
                </dd>
              </dl>
              {!billingOff && (
                <div class="actions">
                  {i.tier === 'free' ? (
                    <button type="button" class="primary" disabled={busy} onClick={() => void upgrade()}>
                      Upgrade to paid
                    </button>
                  ) : (
                    <button type="button" class="danger" disabled={busy} onClick={() => setConfirmDowngrade(true)}>
                      Downgrade to free…
                    </button>
                  )}
                  <button type="button" disabled={busy} onClick={() => void changeCard()}>
                    {i.payment_method?.last4 ? 'Change card' : 'Add a card'}
                  </button>
                </div>
              )}
              {!billingOff && (
                <p class="muted">Cards are entered on Stripe's secure checkout page, never on this site.</p>
              )}
            </>
          )}
        </Show>
      </section>
      {info.data?.tier === 'free' && !billingOff && <PaidTierPrices />}
      <SpendLimitSection tier={info.data?.tier} />
      <section aria-labelledby="invoices">
        <h2 id="invoices">Invoices</h2>
        <Show of={history} what="invoices">
          {(h) =>
            h.invoices.length === 0 ? (
              <p class="muted">No invoices yet. Paid-tier usage is invoiced at the start of each month.</p>
            ) : (
              <TableScroll label="Invoices">
                <table id="invoice-list" class="stack-on-phone" role="table">
                  <thead role="rowgroup">
                    <tr role="row">
                      <th scope="col" role="columnheader">
                        Period
                      </th>
                      <th scope="col" role="columnheader">
                        Kind
                      </th>
                      <th scope="col" role="columnheader">
                        Status
                      </th>
                      <th scope="col" role="columnheader" class="num">
                        Amount
                      </th>
                      <th scope="col" role="columnheader">
                        Invoice
                      </th>
                    </tr>
                  </thead>
                  <tbody role="rowgroup">
                    {[...h.invoices].reverse().map((inv) => (
                      <tr key={inv.id} role="row">
                        <td role="cell" data-label="Period">
                          {utcDate(inv.period_start)} – {utcDate(inv.period_end)}
                        </td>
                        <td role="cell" data-label="Kind">
                          {inv.kind === 'monthly' ? 'Monthly' : 'On demand'}
                        </td>
                        <td role="cell" data-label="Status">
                          {inv.status}
                        </td>
                        <td role="cell" data-label="Amount" class="num">
                          {usd(inv.amount)}
                        </td>
                        <td role="cell" data-label="Invoice">
                          <span>
                            {inv.hosted_invoice_url && (
                              <a href={inv.hosted_invoice_url} target="_blank" rel="noopener noreferrer">
                                View<span class="sr-only"> invoice of {utcDate(inv.created_at)}</span>
                              </a>
                            )}{' '}
                            {inv.invoice_pdf && (
                              <a href={inv.invoice_pdf} target="_blank" rel="noopener noreferrer">
                                PDF<span class="sr-only"> of the invoice of {utcDate(inv.created_at)}</span>
                              </a>
                            )}
                          </span>
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </TableScroll>
            )
          }
        </Show>
      </section>
      <section aria-labelledby="months">
        <h2 id="months">Usage by month</h2>
        <Show of={history} what="billing history">
          {(h) =>
            h.months.length === 0 ? (
              <p class="muted">No usage in the last twelve months.</p>
            ) : (
              <TableScroll label="Usage by month">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Month</th>
                      <th scope="col" class="num">
                        Requests
                      </th>
                      <th scope="col" class="num">
                        Tokens
                      </th>
                      <th scope="col" class="num">
                        Cost
                      </th>
                    </tr>
                  </thead>
                  <tbody>
                    {[...h.months].reverse().map((m) => (
                      <tr key={m.month}>
                        <td>{m.month}</td>
                        <td class="num">{count(m.requests)}</td>
                        <td class="num">{count(m.total_tokens)}</td>
                        <td class="num">{usd(m.cost_usd)}</td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </TableScroll>
            )
          }
        </Show>
      </section>
      <ConfirmDialog
        open={confirmDowngrade}
        title="Downgrade to the free tier?"
        confirmLabel="Downgrade"
        onConfirm={() => void downgrade()}
        onClose={() => setConfirmDowngrade(false)}
      >
        <p>The subscription ends now; usage so far is still invoiced. Free-tier limits apply from the next request.</p>
      </ConfirmDialog>
    </>
  );
}

function SpendLimitSection(props: { tier: 'free' | 'paid' | undefined }) {
  const limit = useLoad(() => api<SpendLimit>('/v1/billing/spend-limit'), [props.tier]);
  const [value, setValue] = useState('');
  const [message, setMessage] = useState<{ kind: 'ok' | 'error'; text: string }>();

  const save = async (method: 'PUT' | 'DELETE') => {
    setMessage(undefined);
    try {
      const r = await apiCall<SpendLimit>(
        method,
        '/v1/billing/spend-limit',
        method === 'PUT' ? { monthly_limit_usd: value.trim() } : undefined,
      );
      setMessage({
        kind: 'ok',
        text:
          r.body.monthly_limit_usd === null
            ? 'Spending limit removed.'
            : `Spending limit set to ${usdCents(r.body.monthly_limit_usd)} a month.`,
      });
      setValue('');
      limit.reload();
    } catch (err) {
      setMessage({ kind: 'error', text: describeError(err) });
    }
  };

  return (
    <section aria-labelledby="spend-limit" class="card">
      <h2 id="spend-limit">Monthly spending limit</h2>
      <Show of={limit} what="the spending limit">
        {(l) => (
          <>
            <SpendGauge limit={l} tier={props.tier ?? 'free'} />
            {props.tier === 'paid' && (
              <form
                class="stack"
                onSubmit={(e) => {
                  e.preventDefault();
                  void save('PUT');
                }}
              >
                <label for="limit-input">
                  {l.monthly_limit_usd === null ? 'Set a limit' : 'New limit'} (USD a month)
                </label>
                <input
                  id="limit-input"
                  inputMode="decimal"
                  pattern="\d{1,7}(\.\d{1,2})?"
                  placeholder="25.00"
                  required
                  aria-describedby="limit-help"
                  value={value}
                  onInput={(e) => setValue((e.target as HTMLInputElement).value)}
                />
                <p id="limit-help" class="muted">
                  Requests that could take spend past it are refused; emails go out at 80% and 100%. Resets{' '}
                  {utcDateTime(l.resets_at)}.
                </p>
                <div class="actions">
                  <button type="submit">Save limit</button>
                  {l.monthly_limit_usd !== null && (
                    <button type="button" onClick={() => void save('DELETE')}>
                      Remove limit
                    </button>
                  )}
                </div>
              </form>
            )}
          </>
        )}
      </Show>
      {message && <Notice kind={message.kind}>{message.text}</Notice>}
    </section>
  );
}
