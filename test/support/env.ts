import { randomBytes } from 'node:crypto';
import { loadConfig, type Config, type Env } from '../../src/config.js';
import { TEST_PROVIDERS } from './providers/providers.js';

/** The environment `npm test` prepared (isolated database and Redis prefix), plus test defaults. */
export function testEnv(overrides: Env = {}): Env {
  return {
    ...process.env,
    NODE_ENV: 'test',
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    // Every test signs up from 127.0.0.1: the sign-up limits have tests of their own, which set them.
    SIGNUP_PER_CLIENT_PER_HOUR: '100000',
    SIGNUP_PER_ADDRESS_PER_HOUR: '1000',
    SIGNIN_PER_CLIENT_PER_HOUR: '100000',
    SIGNIN_PER_ADDRESS_PER_HOUR: '1000',
    // Likewise every unauthenticated request and refused credential counts against 127.0.0.1's
    // abuse budget; the budget's tests set theirs. Accounts keep the defaults a real client meets.
    ABUSE_BUDGET_CLIENT_REQUESTS_PER_MINUTE: '100000000',
    ABUSE_BUDGET_CLIENT_BYTES_PER_MINUTE: String(1024 ** 4),
    ...overrides,
  };
}

/** The configuration of an in-process test, serving the suite's providers (the test tree's own among them). */
export function testConfig(overrides: Env = {}): Config {
  return loadConfig(testEnv(overrides), TEST_PROVIDERS);
}

/** The operator credential (ADMIN_TOKEN) of the tests that read what only an operator sees. */
export const OPERATOR_TOKEN = 'test-operator-token-0123456789abcdefghij';

export const randomId = (bytes = 6): string => randomBytes(bytes).toString('hex');

/**
 * Marks a test that can only run against one Redis server (it watches the server with MONITOR, or
 * restarts it): the cluster run of the suite leaves such tests out (scripts/test.mjs).
 */
export const ONE_REDIS_SERVER = '[one Redis server]';

/** A Redis prefix of its own, inside this run's prefix (so the run's cleanup removes it). */
export const isolatedPrefix = (): string => `${process.env.REDIS_PREFIX ?? 'test'}:${randomId(4)}`;

export const uniqueEmail = (tag = 'user'): string => `${tag}.${randomId()}@example.com`;
