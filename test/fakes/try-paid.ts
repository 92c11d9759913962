// `npm run try-paid`: the paid path, end to end and offline, against the fake Stripe. It starts the
// fake, then a web process and a worker pointed at it (the built code, on the database and Redis
// `npm start` uses, under a key prefix of their own so a running `npm start` is not disturbed),
// and walks what a newcomer would: sign up, verify, upgrade through a hosted checkout (the fake
// completes it with a test card, as a person would on Stripe's page), a paid-tier completion,
// usage with its cost, and an invoice. Every step prints the request and the answer.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { FakeStripe } from './stripe.js';

const ENTRIES = { web: '../../src/http/server.js', worker: '../../workers/worker.js' };
const READY = /listening on http|"msg":"worker: running/;
const PAID_MODEL = 'gpt-4.1';

const children: ChildProcess[] = [];

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** One role of the service, resolved once it says it is ready (its output is shown only if it fails). */
function startRole(role: keyof typeof ENTRIES, env: NodeJS.ProcessEnv): Promise<void> {
  const child = spawn(process.execPath, [fileURLToPath(new URL(ENTRIES[role], import.meta.url))], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let out = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the ${role} was not ready within 30 s:\n${out}`)), 30_000);
    const seen = (chunk: Buffer) => {
      out += chunk.toString();
      if (READY.test(out)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout.on('data', seen);
    child.stderr.on('data', seen);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the ${role} exited with ${code} before it was ready:\n${out}`));
    });
  });
}

/** Polls until `probe` gives a value: the email and the usage arrive a moment after the request. */
async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`no ${what} within ${timeoutMs / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function main(): Promise<void> {
  const fake = await new FakeStripe().start();
  const mailDir = await mkdtemp(path.join(os.tmpdir(), 'try-paid-mail-'));
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const env = {
    ...process.env,
    ...fake.env(),
    HOST: '127.0.0.1',
    PORT: String(port),
    PUBLIC_BASE_URL: base,
    // Queues and limits of their own: a running `npm start` (on REDIS_PREFIX) takes none of these jobs.
    REDIS_PREFIX: `${process.env.REDIS_PREFIX ?? 'svc'}_try_paid`,
    MAIL_TRANSPORT: 'dev-outbox',
    MAIL_DEV_DIR: mailDir,
    LOCAL_MODEL_TTFT_MS: '0',
    // Info, for the line that says a role is ready; the output is shown only if a role fails.
    LOG_LEVEL: 'info',
  };
  try {
    console.log(`fake Stripe at ${fake.url}; starting a web process at ${base} and a worker pointed at it`);
    await Promise.all([startRole('web', env), startRole('worker', env)]);

    const call = async (method: string, url: string, opts: { key?: string; json?: unknown } = {}) => {
      const res = await fetch(url.startsWith('http') ? url : `${base}${url}`, {
        method,
        headers: {
          accept: 'application/json',
          ...(opts.key ? { authorization: `Bearer ${opts.key}` } : {}),
          ...(opts.json !== undefined ? { 'content-type': 'application/json' } : {}),
        },
        body: opts.json === undefined ? undefined : JSON.stringify(opts.json),
      });
      const body = (await res.json()) as Record<string, unknown>;
      console.log(`\n${method} ${url.replace(base, '').split('?')[0]} -> ${res.status}\n${JSON.stringify(body)}`);
      if (!res.ok) throw new Error(`${method} ${url} answered ${res.status}`);
      return body;
    };

    const email = `paid.${Date.now()}@example.com`;
    await call('POST', '/v1/auth/signup', { json: { name: 'Ada Lovelace', email, organization: 'Engines Ltd' } });
    const link = await waitFor('verification email', async () => {
      // Only finished messages: the outbox writes each under another name first, then renames it.
      for (const file of (await readdir(mailDir)).filter((f) => f.endsWith('.json'))) {
        const message = JSON.parse(await readFile(path.join(mailDir, file), 'utf8')) as { to: string; text: string };
        if (message.to === email)
          return /https?:\/\/\S+\/v1\/auth\/verify\?token=[A-Za-z0-9_%-]+/.exec(message.text)?.[0];
      }
      return undefined;
    });
    const key = (await call('GET', link)).api_key as string;

    // No card on file yet: the answer is a hosted checkout session.
    const checkout = await call('POST', '/v1/subscription/upgrade', { key });
    // What a person does on Stripe's checkout page: enter a card (the fake's test card). Stripe then
    // sends the browser back to the service's success URL, which finishes the upgrade.
    const { returnUrl } = fake.completeCheckoutSession(checkout.checkout_session_id as string);
    await call('GET', returnUrl);
    await call('GET', '/v1/subscription/info', { key });

    await call('POST', '/v1/chat/completions', {
      key,
      // A long prompt (about 5,000 tokens, a cent), so the invoice has more than half a cent to bill.
      json: { model: PAID_MODEL, messages: [{ role: 'user', content: 'Tell me about the paid tier. '.repeat(800) }] },
    });
    // The worker meters the completion a moment after it ends.
    await waitFor('metered usage', async () => {
      const res = await fetch(`${base}/v1/billing/usage`, { headers: { authorization: `Bearer ${key}` } });
      const usage = (await res.json()) as { total?: { requests?: number } };
      return (usage.total?.requests ?? 0) > 0 ? usage : undefined;
    });
    await call('GET', '/v1/billing/usage', { key });
    const invoice = await call('POST', '/v1/billing/generate-invoice', { key });
    console.log(`\nThe paid path worked: ${email} is paid, used ${PAID_MODEL}; invoice: ${String(invoice.status)}.`);
  } finally {
    for (const child of children) child.kill('SIGTERM');
    await Promise.all(
      children.map((c) =>
        c.exitCode !== null ? Promise.resolve() : new Promise<void>((resolve) => c.once('exit', () => resolve())),
      ),
    );
    await fake.close();
    await rm(mailDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(`\ntry-paid failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 1;
});
