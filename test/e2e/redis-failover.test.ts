import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { countTokens } from '../../src/providers/tokenizer.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { LocalRedisCluster } from '../support/redis-cluster.js';
import { readSse } from '../support/sse.js';

/** How a client's stream ended: its whole answer with [DONE], a clean error, or a refusal. */
interface Outcome {
  id: string | undefined;
  status: number;
  done: boolean;
  error: string | undefined;
  text: string;
  usage: { prompt_tokens: number; completion_tokens: number } | undefined;
}

async function stream(url: string, apiKey: string, body: object): Promise<Outcome> {
  // No client waits forever: a stream still open after this long counts as hung.
  const res = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
    signal: AbortSignal.timeout(60_000),
  });
  if (res.status !== 200)
    return {
      id: undefined,
      status: res.status,
      done: false,
      error: ((await res.json()) as { error: { code: string } }).error.code,
      text: '',
      usage: undefined,
    };
  const { events } = await readSse(res);
  let text = '';
  let id: string | undefined;
  let error: string | undefined;
  let usage: Outcome['usage'];
  for (const e of events) {
    if (e === '[DONE]') continue;
    const chunk = JSON.parse(e) as {
      id?: string;
      error?: { code: string };
      usage?: Outcome['usage'];
      choices?: { delta?: { content?: string } }[];
    };
    id ??= chunk.id;
    if (chunk.error) error = chunk.error.code;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices ?? []) text += c.delta?.content ?? '';
  }
  return { id, status: 200, done: events.at(-1) === '[DONE]' && error === undefined, error, text, usage };
}

// A Redis Cluster with a replica per master loses the master that serves the web process's relay
// channel while streams run: the cluster fails over to its replica in a few seconds.
describe('a Redis Cluster master failing over during streams', function () {
  this.timeout(180_000);
  let cluster: LocalRedisCluster;
  let app: AppContext;
  let web: RoleProcess;
  let workers: RoleProcess[];
  let account: TestAccount;
  const prefix = isolatedPrefix();

  before(async () => {
    cluster = await new LocalRedisCluster({ masters: 3, replicas: 1 }).start();
    const env = {
      REDIS_URL: '',
      REDIS_CLUSTER_NODES: cluster.seeds,
      REDIS_SHARDS: '3',
      REDIS_PREFIX: prefix,
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '20',
    };
    app = createContext(testConfig(env), { role: 'test' });
    [web, ...workers] = await Promise.all([startRole('web', env), startRole('worker', env), startRole('worker', env)]);
    account = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => {
    await Promise.all([web, ...(workers ?? [])].filter(Boolean).map((p) => p.stop('SIGKILL')));
    await app?.close();
    await cluster?.stop();
  });

  it('ends every stream with its whole answer or a clean error, never hangs, and bills each request once (a whole answer exactly)', async () => {
    const url = `${web.url}/v1/chat/completions`;
    const ask = {
      model: 'gemini-2.5-flash',
      messages: [{ role: 'user', content: 'Tell me a long story' }],
      max_tokens: 60,
    };
    const runs: Promise<Outcome>[] = [];
    for (let i = 0; i < 12; i++) runs.push(stream(url, account.apiKey, ask));
    // The web process's one relay channel lives on one master: find it once the streams flow.
    const channel = await eventually(async () => {
      const client = cluster.client();
      try {
        await client.ping();
        for (const node of client.nodes('master')) {
          const [found] = (await node.call('PUBSUB', 'SHARDCHANNELS', `${prefix}:relay:*`)) as string[];
          if (found) return found;
        }
        return undefined;
      } finally {
        client.disconnect();
      }
    }, 'the web process to subscribe to its relay channel');
    // Every stream under way (a relay log each) before the master goes.
    await eventually(async () => {
      const client = cluster.client();
      try {
        await client.ping();
        let logs = 0;
        for (const node of client.nodes('master')) logs += (await node.keys(`${prefix}:rlog:*`)).length;
        return logs >= 12 ? true : undefined;
      } finally {
        client.disconnect();
      }
    }, 'the twelve streams to be under way');
    await cluster.kill(await cluster.masterOf(channel));
    // More streams while the cluster fails over.
    for (let i = 0; i < 6; i++) runs.push(stream(url, account.apiKey, ask));
    const outcomes = await Promise.all(runs);

    for (const o of outcomes) {
      // Refused at the door (503 while Redis was away), or a stream that ended one way or the other.
      if (o.status !== 200) {
        expect(o.status, JSON.stringify(o)).to.equal(503);
        continue;
      }
      expect(o.done || o.error !== undefined, JSON.stringify(o)).to.equal(true);
    }
    const streamed = outcomes.filter((o) => o.status === 200);
    expect(streamed.filter((o) => o.done).length, 'streams that completed').to.be.above(0);

    // Every streamed request is in the ledger once; a complete one is billed what its client was told.
    const ids = streamed.map((o) => o.id!);
    const rows = await eventually(
      async () => {
        const r = await app.db
          .selectFrom('usage_events')
          .selectAll()
          .where('account_id', '=', account.account.id)
          .execute();
        return r.length >= ids.length ? r : undefined;
      },
      'every streamed request in the ledger',
      60_000,
    );
    expect(rows.map((r) => r.request_id).sort()).to.deep.equal([...ids].sort());
    for (const o of streamed.filter((x) => x.done)) {
      const row = rows.find((r) => r.request_id === o.id)!;
      expect(row.status).to.equal('completed');
      expect(row.completion_tokens).to.equal(o.usage!.completion_tokens);
      expect(countTokens(o.text)).to.equal(o.usage!.completion_tokens);
    }
  });
});
