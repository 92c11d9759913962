import { expect } from 'chai';
import OpenAI from 'openai';
import { sql } from 'kysely';
import { createTestAccount } from '../support/accounts.js';
import { eventually, get, post } from '../support/http.js';
import { webAndWorkerWithStripe } from '../support/stripe-service.js';

// What the console reads and where Stripe's hosted checkout sends the browser back, through the
// real web and worker processes: completions made with the openai SDK show in the requests list
// with their ids and stream flags and in the daily usage, and each checkout return lands on the
// console's billing page, against the fake Stripe.

const BROWSER = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';

describe('console data and checkout returns, through the web and worker processes', () => {
  const s = webAndWorkerWithStripe();

  /** The browser follows Stripe's redirect to a URL naming this web process. */
  const onWeb = (url: string) => {
    const u = new URL(url);
    return `${s.web.url}${u.pathname}${u.search}`;
  };
  const asBrowser = (url: string) => get(url, { headers: { accept: BROWSER }, redirect: 'manual' });

  it('lists completions and responses made with the openai SDK by their ids, APIs and stream flags, and counts them per UTC day and API as the ledger does', async () => {
    const who = await createTestAccount(s.app);
    const client = new OpenAI({ apiKey: who.apiKey, baseURL: `${s.web.url}/v1`, maxRetries: 0 });
    const messages = [{ role: 'user' as const, content: 'Say something short.' }];
    const plain = await client.chat.completions.create({ model: 'gemini-2.5-flash', messages, max_tokens: 20 });
    const stream = await client.chat.completions.create({
      model: 'gemini-2.5-flash',
      messages,
      max_tokens: 20,
      stream: true,
      stream_options: { include_usage: true },
    });
    let streamedId = '';
    let streamedUsage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      streamedId = chunk.id;
      if (chunk.usage) streamedUsage = chunk.usage;
    }
    const response = await client.responses.create({
      model: 'gemini-2.5-flash',
      input: 'Say something short.',
      max_output_tokens: 20,
    });

    // The worker's usage reaches the ledger through the metering stream shortly after each answer.
    const listed = await eventually(async () => {
      const r = await get(`${s.web.url}/v1/billing/requests`, { bearer: who.apiKey });
      return r.body?.data?.length === 3 ? r.body : undefined;
    }, 'the three requests in the ledger');
    expect(listed.has_more).to.equal(false);
    // Requests of one second are in no particular order among themselves: find each by its id.
    const byId = (id: string) => listed.data.find((d: { id: string }) => d.id === id);
    expect(byId(response.id)).to.include({
      api: 'responses',
      model: 'gemini-2.5-flash',
      stream: false,
      status: 'completed',
      prompt_tokens: response.usage!.input_tokens,
      completion_tokens: response.usage!.output_tokens,
    });
    expect(byId(streamedId)).to.include({
      api: 'chat.completions',
      id: streamedId,
      model: 'gemini-2.5-flash',
      stream: true,
      status: 'completed',
      prompt_tokens: streamedUsage!.prompt_tokens,
      completion_tokens: streamedUsage!.completion_tokens,
      cost_usd: '0',
    });
    expect(byId(plain.id)).to.include({
      api: 'chat.completions',
      id: plain.id,
      created: plain.created,
      stream: false,
      status: 'completed',
      prompt_tokens: plain.usage!.prompt_tokens,
      completion_tokens: plain.usage!.completion_tokens,
    });

    const daily = await get(`${s.web.url}/v1/billing/usage/daily`, { bearer: who.jwt });
    expect(daily.status, daily.text).to.equal(200);
    const ledger = await sql<{ requests: string; prompt: string; completion: string }>`
      select count(*)::text as requests, sum(prompt_tokens)::text as prompt, sum(completion_tokens)::text as completion
        from usage_events where account_id = ${who.account.id}`.execute(s.app.db);
    expect(daily.body.totals).to.include({
      requests: Number(ledger.rows[0]!.requests),
      prompt_tokens: Number(ledger.rows[0]!.prompt),
      completion_tokens: Number(ledger.rows[0]!.completion),
    });
    expect(daily.body.data.map((d: { model: string }) => d.model)).to.deep.equal(['gemini-2.5-flash']);
    const perApi = await sql<{ api: string; requests: string }>`
      select api, count(*)::text as requests from usage_events where account_id = ${who.account.id} group by api order by api`.execute(
      s.app.db,
    );
    expect(perApi.rows).to.deep.equal([
      { api: 'chat.completions', requests: '2' },
      { api: 'responses', requests: '1' },
    ]);
    expect(daily.body.by_api.map((a: { api: string; requests: number }) => [a.api, a.requests])).to.deep.equal([
      ['chat.completions', 2],
      ['responses', 1],
    ]);
  });

  it("sends the browser back to the console's billing page after an upgrade, a cancelled checkout and a card change", async () => {
    const who = await createTestAccount(s.app);
    const upgrade = await post(`${s.web.url}/v1/subscription/upgrade`, undefined, { bearer: who.jwt });
    expect(upgrade.body.status, upgrade.text).to.equal('checkout_required');

    const cancelled = await asBrowser(onWeb(s.fake.checkoutSessions.get(upgrade.body.checkout_session_id)!.cancel_url));
    expect(cancelled.status).to.equal(303);
    expect(cancelled.headers.get('location')).to.equal('/console/billing?upgrade=cancelled');

    const paid = s.fake.completeCheckoutSession(upgrade.body.checkout_session_id, { last4: '1111' });
    const back = await asBrowser(onWeb(paid.returnUrl));
    expect(back.status).to.equal(303);
    expect(back.headers.get('location')).to.equal('/console/billing?upgrade=done');
    const readAccount = () =>
      s.app.db.selectFrom('accounts').selectAll().where('id', '=', who.account.id).executeTakeFirstOrThrow();
    expect(await readAccount()).to.include({ tier: 'paid', payment_method_last4: '1111' });

    const change = await post(`${s.web.url}/v1/subscription/payment-method-checkout`, undefined, { bearer: who.jwt });
    expect(change.status, change.text).to.equal(200);
    const card = s.fake.completeCheckoutSession(change.body.id, { brand: 'mastercard', last4: '4444' });
    const updated = await asBrowser(onWeb(card.returnUrl));
    expect(updated.status).to.equal(303);
    expect(updated.headers.get('location')).to.equal('/console/billing?card=updated');
    const row = await readAccount();
    expect(row).to.include({
      tier: 'paid',
      default_payment_method_id: card.paymentMethod.id,
      payment_method_brand: 'mastercard',
      payment_method_last4: '4444',
    });
    expect(s.fake.subscriptions.get(row.stripe_subscription_id!)!.default_payment_method).to.equal(
      card.paymentMethod.id,
    );
  });
});
