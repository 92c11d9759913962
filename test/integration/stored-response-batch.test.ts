import { randomBytes, randomUUID } from 'node:crypto';
import { expect } from 'chai';
import { sql } from 'kysely';
import { createContext, type AppContext } from '../../src/context.js';
import type { StoredResponseEndWrite } from '../../src/responses/stored-responses.repository.js';
import { storedResponseBatch } from '../../src/responses/stored-response-batch.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { testConfig } from '../support/env.js';

// A worker stores each Responses API answer as it ends (store: true); the answers that end
// together go to Postgres in one statement, each caller waiting for its own write.
describe('stored responses written together (a worker at the end of its answers)', () => {
  let app: AppContext;
  let owner: TestAccount;
  let other: TestAccount;

  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
    owner = await createTestAccount(app);
    other = await createTestAccount(app);
  });
  after(async () => {
    await app.close();
  });

  const newId = () => `resp_${randomBytes(12).toString('hex')}`;
  const write = (id: string, accountId: string, text: string): StoredResponseEndWrite => {
    const now = app.clock.now();
    return {
      id,
      accountId,
      status: 'completed',
      response: { id, object: 'response', status: 'completed', output_text: text },
      inputItems: [{ id: `msg_${id.slice(5)}`, type: 'message', role: 'user', content: text }],
      now,
      expiresAt: new Date(now.getTime() + 86_400_000),
    };
  };
  /** Each row's object and the transaction that wrote it last. */
  const rows = async (ids: string[]) =>
    (
      await app.db
        .selectFrom('stored_responses')
        .select(['id', 'account_id', 'response', 'input_items', sql<string>`xmin::text`.as('xid')])
        .where('id', 'in', ids)
        .orderBy('id')
        .execute()
    ).map((r) => ({ ...r, text: (r.response as { output_text: string }).output_text }));

  it('stores the answers that end in one turn in one transaction, each with its own object and input', async () => {
    const store = storedResponseBatch(app.db);
    const ids = Array.from({ length: 5 }, newId).sort();
    await Promise.all(ids.map((id, i) => store(write(id, owner.account.id, `answer ${i}`))));
    const stored = await rows(ids);
    expect(stored.map((r) => [r.id, r.account_id, r.text])).to.deep.equal(
      ids.map((id, i) => [id, owner.account.id, `answer ${i}`]),
    );
    expect(stored.map((r) => r.input_items)).to.deep.equal(ids.map((id, i) => write(id, '', `answer ${i}`).inputItems));
    expect(new Set(stored.map((r) => r.xid)).size).to.equal(1);
  });

  it('fails only the write Postgres refuses, and stores the others that went with it', async () => {
    const store = storedResponseBatch(app.db);
    const [good1, bad, good2] = [newId(), newId(), newId()];
    const results = await Promise.allSettled([
      store(write(good1, owner.account.id, 'one')),
      store(write(bad, randomUUID(), 'no such account')),
      store(write(good2, owner.account.id, 'two')),
    ]);
    expect(results.map((r) => r.status)).to.deep.equal(['fulfilled', 'rejected', 'fulfilled']);
    expect((results[1] as PromiseRejectedResult).reason).to.match(/foreign key/);
    expect((await rows([good1, bad, good2])).map((r) => [r.id, r.text]).sort()).to.deep.equal(
      [
        [good1, 'one'],
        [good2, 'two'],
      ].sort(),
    );
  });

  it('applies two writes of one response made in one turn in the order they were made', async () => {
    const store = storedResponseBatch(app.db);
    const id = newId();
    await Promise.all([store(write(id, owner.account.id, 'first')), store(write(id, owner.account.id, 'second'))]);
    expect((await rows([id])).map((r) => r.text)).to.deep.equal(['second']);
  });

  it("leaves another account's response as it was when a write names its id", async () => {
    const store = storedResponseBatch(app.db);
    const id = newId();
    await store(write(id, other.account.id, 'theirs'));
    await Promise.all([store(write(id, owner.account.id, 'mine')), store(write(newId(), owner.account.id, 'x'))]);
    expect((await rows([id])).map((r) => [r.account_id, r.text])).to.deep.equal([[other.account.id, 'theirs']]);
  });
});
