import type { Catalog } from '../catalog/catalog.js';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { AppError, validationError, type ValidationIssue } from '../errors.js';
import { onCommit, transaction, type Db, type Trx } from '../infra/db.js';
import type { RedisClient } from '../infra/redis.js';
import { nanoUsdOf } from '../usage/usage-cost.js';
import { generateApiKey, redactedValue } from './api-keys.js';
import { lockAccount, type ApiKeyRow } from './accounts.repository.js';
import { invalidateAccountKeys, prepareKeyRevocation } from './auth.service.js';
import {
  countLiveKeys,
  findKeysByIds,
  findLiveKey,
  insertKey,
  listLiveKeys,
  revokeKey,
  updateKey,
} from './keys.repository.js';
import {
  MAX_KEYS_PER_ACCOUNT,
  MAX_KEY_MONTHLY_LIMIT_USD,
  type CreateKeyInput,
  type KeyLimitsInput,
  type UpdateKeyInput,
} from './keys.schema.js';

/** What managing keys works with: the keys, the catalog their allow-lists name, what tells every process. */
export interface KeysDeps {
  db: Db;
  redis: RedisClient;
  clock: Clock;
  log: Logger;
  catalog: Catalog;
  config: Pick<Config, 'redis'>;
}

/** A key as the API shows it: never its secret, nor its hash. */
export interface KeyView {
  id: string;
  name: string;
  redacted_value: string;
  is_default: boolean;
  created_at: string;
  last_used_at: string | null;
  expires_at: string | null;
  models: string[] | null;
  limits: { requests_per_minute: number | null; monthly_spend_limit_usd: string | null };
  disabled: boolean;
}

export function keyView(row: ApiKeyRow): KeyView {
  return {
    id: row.id,
    name: row.name,
    redacted_value: redactedValue(row),
    is_default: row.is_default,
    created_at: row.created_at.toISOString(),
    last_used_at: row.last_used_at?.toISOString() ?? null,
    expires_at: row.expires_at?.toISOString() ?? null,
    models: row.models,
    limits: { requests_per_minute: row.requests_per_minute, monthly_spend_limit_usd: row.monthly_spend_limit_usd },
    disabled: row.disabled,
  };
}

/** How usage names the key that made it: a revoked key keeps its name; a key no longer on record (or none) has none. */
export interface KeyLabel {
  key_id: string | null;
  name: string | null;
  redacted_value: string | null;
  is_default: boolean;
  revoked: boolean;
}

/**
 * The labels of some of the account's keys by id, for usage read per key. An id with no key of the
 * account on record reads as revoked, with no name; null (usage from before keys were recorded) as
 * neither default nor revoked.
 */
export async function keyLabels(
  app: Pick<KeysDeps, 'db'>,
  accountId: string,
  keyIds: (string | null)[],
): Promise<(keyId: string | null) => KeyLabel> {
  const ids = [...new Set(keyIds.filter((id): id is string => id !== null))];
  const rows = new Map((await findKeysByIds(app.db, accountId, ids)).map((r) => [r.id, r]));
  return (keyId) => {
    if (keyId === null) return { key_id: null, name: null, redacted_value: null, is_default: false, revoked: false };
    const row = rows.get(keyId);
    if (!row) return { key_id: keyId, name: null, redacted_value: null, is_default: false, revoked: true };
    return {
      key_id: keyId,
      name: row.name,
      redacted_value: redactedValue(row),
      is_default: row.is_default,
      revoked: row.revoked_at !== null,
    };
  };
}

const keyNotFound = () =>
  new AppError('not_found', 'No key with this id belongs to the account (it may have been deleted).', {
    code: 'key_not_found',
    param: 'id',
  });

/**
 * The checks the schema cannot make: every model of an allow-list is in the catalog, a spending
 * limit is within range, an expiry is in the future. All issues are reported together.
 */
function checkSettings(app: Pick<KeysDeps, 'catalog' | 'clock'>, input: UpdateKeyInput): void {
  const issues: ValidationIssue[] = [];
  input.models?.forEach((model, i) => {
    if (!app.catalog.find(model))
      issues.push({
        loc: ['body', 'models', i],
        msg: `Unknown model '${model}'; GET /v1/models lists the models`,
        type: 'value_error',
      });
  });
  const spend = input.limits?.monthly_spend_limit_usd;
  if (spend != null) {
    const loc = ['body', 'limits', 'monthly_spend_limit_usd'];
    if (nanoUsdOf(spend) < nanoUsdOf('0.01'))
      issues.push({ loc, msg: 'Input should be greater than or equal to 0.01', type: 'greater_than_equal' });
    else if (nanoUsdOf(spend) > nanoUsdOf(String(MAX_KEY_MONTHLY_LIMIT_USD)))
      issues.push({
        loc,
        msg: `Input should be less than or equal to ${MAX_KEY_MONTHLY_LIMIT_USD}`,
        type: 'less_than_equal',
      });
  }
  if (input.expires_at != null && new Date(input.expires_at).getTime() <= app.clock.now().getTime())
    issues.push({ loc: ['body', 'expires_at'], msg: 'Input should be in the future', type: 'value_error' });
  if (issues.length > 0) throw validationError(issues);
}

/** Columns for the settings a body gives; what it leaves out is not changed. */
function settingsOf(input: UpdateKeyInput) {
  const limits: KeyLimitsInput = input.limits ?? {};
  return {
    ...(input.name !== undefined ? { name: input.name } : {}),
    ...(input.models !== undefined ? { models: input.models && [...new Set(input.models)] } : {}),
    ...(input.expires_at !== undefined
      ? { expires_at: input.expires_at === null ? null : new Date(input.expires_at) }
      : {}),
    ...(limits.requests_per_minute !== undefined ? { requests_per_minute: limits.requests_per_minute } : {}),
    ...(limits.monthly_spend_limit_usd !== undefined
      ? {
          monthly_spend_limit_usd:
            limits.monthly_spend_limit_usd === null ? null : normalizeUsd(limits.monthly_spend_limit_usd),
        }
      : {}),
    ...(input.disabled !== undefined ? { disabled: input.disabled } : {}),
  };
}

/** "7.5" as the numeric(9,2) column returns it, "7.50", so the answer matches later reads. */
const normalizeUsd = (usd: string): string => {
  const [whole, fraction = ''] = usd.split('.');
  return `${whole}.${fraction.padEnd(2, '0')}`;
};

/** GET /v1/keys: the account's live keys, the default key first, then oldest first. */
export async function listKeys(
  app: Pick<KeysDeps, 'db'>,
  accountId: string,
): Promise<{ object: 'list'; data: KeyView[] }> {
  const rows = await listLiveKeys(app.db, accountId);
  return { object: 'list', data: rows.map(keyView) };
}

/**
 * POST /v1/keys: a new key, its secret returned this once. Under the account's row lock, so two
 * concurrent creations cannot both pass the count of live keys.
 */
export async function createKey(
  app: KeysDeps,
  accountId: string,
  input: CreateKeyInput,
): Promise<KeyView & { api_key: string }> {
  checkSettings(app, input);
  const now = app.clock.now();
  return transaction(app.db, async (trx) => {
    await lockOwnAccount(trx, accountId);
    if ((await countLiveKeys(trx, accountId)) >= MAX_KEYS_PER_ACCOUNT)
      throw new AppError(
        'conflict',
        `An account can hold at most ${MAX_KEYS_PER_ACCOUNT} keys; delete one you no longer use (DELETE /v1/keys/{id}) first.`,
        { code: 'key_limit_reached' },
      );
    const key = generateApiKey();
    const row = await insertKey(trx, {
      account_id: accountId,
      key_hash: key.hash,
      display_prefix: key.displayPrefix,
      last4: key.last4,
      is_default: false,
      created_at: now,
      ...settingsOf(input),
    });
    app.log.info({ accountId, keyId: row.id }, 'API key created');
    return { ...keyView(row), api_key: key.key };
  });
}

/**
 * PATCH /v1/keys/{id}: what the body gives changes, the rest stays. The change is made the way a
 * revocation is (the account is marked changing before the commit, its version bumped after), so
 * a narrower allow-list, a lower limit or a disabled flag holds on every web process from the
 * next request.
 */
export async function changeKey(
  app: KeysDeps,
  accountId: string,
  keyId: string,
  input: UpdateKeyInput,
): Promise<KeyView> {
  checkSettings(app, input);
  return transaction(app.db, async (trx) => {
    await lockOwnAccount(trx, accountId);
    const settings = settingsOf(input);
    const row =
      Object.keys(settings).length === 0
        ? await findLiveKey(trx, accountId, keyId)
        : await updateKey(trx, accountId, keyId, settings);
    if (!row) throw keyNotFound();
    if (Object.keys(settings).length > 0) await reachEveryProcess(app, trx, accountId);
    return keyView(row);
  });
}

/**
 * DELETE /v1/keys/{id}: revoked at once on every web process. The default key is replaced by
 * regeneration instead (409 default_key): an account keeps the key the interface promises it.
 */
export async function deleteKey(
  app: KeysDeps,
  accountId: string,
  keyId: string,
): Promise<{ id: string; object: 'api_key.deleted'; deleted: true }> {
  return transaction(app.db, async (trx) => {
    await lockOwnAccount(trx, accountId);
    const key = await findLiveKey(trx, accountId, keyId);
    if (!key) throw keyNotFound();
    if (key.is_default)
      throw new AppError(
        'conflict',
        'The default key cannot be deleted: replace it with POST /v1/auth/regenerate-api-key, or disable it with PATCH /v1/keys/{id}.',
        { code: 'default_key', param: 'id' },
      );
    await revokeKey(trx, key.id, app.clock.now());
    await reachEveryProcess(app, trx, accountId);
    app.log.info({ accountId, keyId }, 'API key revoked');
    return { id: key.id, object: 'api_key.deleted', deleted: true };
  });
}

/** Last before the commit: if Redis refuses the mark, nothing is committed (503) and the key stays as it was. */
async function reachEveryProcess(app: KeysDeps, trx: Trx, accountId: string): Promise<void> {
  onCommit(trx, () => invalidateAccountKeys(app, accountId));
  await prepareKeyRevocation(app, accountId);
}

async function lockOwnAccount(trx: Trx, accountId: string): Promise<void> {
  const account = await lockAccount(trx, accountId);
  if (!account) throw new AppError('not_found', 'Account not found', { code: 'account_not_found' });
  // A closure under way revoked the keys; a key made or changed now would work until it is repeated.
  if (account.closing_at !== null)
    throw new AppError('conflict', 'The account is being closed: its keys can no longer be created or changed.', {
      code: 'account_closing',
    });
}
