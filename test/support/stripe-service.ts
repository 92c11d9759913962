import { createContext, type AppContext } from '../../src/context.js';
import type { Env } from '../../src/config.js';
import { FakeStripe } from '../fakes/stripe.js';
import { testConfig } from './env.js';
import { startRole, type RoleProcess } from './processes.js';

/** The local model answering at once, so a test's completions take milliseconds. */
export const FAST_LOCAL_MODEL = { LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '5000' };

export interface StripeService {
  readonly fake: FakeStripe;
  /** A context on the same database, Redis and Stripe, for set-up and assertions. */
  readonly app: AppContext;
  readonly web: RoleProcess;
  readonly worker: RoleProcess;
}

/**
 * For a describe block: the fake Stripe, and web and worker processes pointed at it with the fast
 * local model, started before its tests and stopped after them. Read the fields inside tests.
 */
export function webAndWorkerWithStripe(env: Env = {}): StripeService {
  const s = {} as { -readonly [K in keyof StripeService]: StripeService[K] };
  before(async () => {
    s.fake = await new FakeStripe().start();
    s.app = createContext(testConfig(s.fake.env()), { role: 'test' });
    [s.web, s.worker] = await Promise.all([
      startRole('web', { ...s.fake.env(), ...FAST_LOCAL_MODEL, ...env }),
      startRole('worker', { ...s.fake.env(), ...FAST_LOCAL_MODEL, ...env }),
    ]);
  });
  after(async () => {
    await Promise.all([s.web?.stop(), s.worker?.stop()]);
    await s.app?.close();
    await s.fake?.close();
  });
  return s;
}
