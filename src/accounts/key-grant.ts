import { AppError } from '../errors.js';
import type { Selectable } from 'kysely';
import type { AccountsTable } from '../../db/schema/accounts.js';

/**
 * What one API key allows, beyond its account: read with the account on every key lookup and
 * cached with it (ApiKeyCache), so admission checks it without a round trip of its own. A change
 * (PATCH /v1/keys/{id}) bumps the account's version, so every process reads it afresh.
 */
export interface ApiKeyGrant {
  id: string;
  expires_at: Date | null;
  /** The models the key may use, or null for every model of the tier. */
  models: string[] | null;
  requests_per_minute: number | null;
  /** The key's own monthly spending limit in USD ("25.00"), or null for none. */
  monthly_spend_limit_usd: string | null;
  disabled: boolean;
}

/** The account an API key authenticated, with what the key itself allows. */
export type KeyedAccount = Selectable<AccountsTable> & { apiKey: ApiKeyGrant };

/** 401 for a key that is disabled or past its expiry: a key that does not work, as a revoked one. */
export function assertKeyUsable(grant: ApiKeyGrant, now: Date): void {
  if (grant.disabled)
    throw new AppError(
      'authentication',
      'This API key is disabled. Enable it again with PATCH /v1/keys/{id} (or in the console), or use another key.',
      { code: 'invalid_api_key' },
    );
  if (grant.expires_at !== null && grant.expires_at.getTime() <= now.getTime())
    throw new AppError(
      'authentication',
      `This API key expired at ${grant.expires_at.toISOString()}. Create a new key with POST /v1/keys (or in the console).`,
      { code: 'invalid_api_key' },
    );
}

/** True when the key may use the model (a key without an allow-list may use every model of its tier). */
export const keyAllowsModel = (grant: ApiKeyGrant | undefined, modelId: string): boolean =>
  !grant?.models || grant.models.includes(modelId);

/** 403 model_not_allowed for a model outside the key's allow-list. */
export function assertModelAllowed(grant: ApiKeyGrant | undefined, modelId: string): void {
  if (keyAllowsModel(grant, modelId)) return;
  throw new AppError(
    'permission',
    `This API key may not use the model \`${modelId}\`; it may use: ${grant!.models!.join(', ')}. Change the key's models with PATCH /v1/keys/{id}, or use another key.`,
    { code: 'model_not_allowed', param: 'model' },
  );
}

/** The key's settings as a lookup row carries them, under the `key_` aliases of the account lookup. */
export interface GrantColumns {
  key_id: string;
  key_expires_at: Date | null;
  key_models: string[] | null;
  key_requests_per_minute: number | null;
  key_monthly_spend_limit_usd: string | null;
  key_disabled: boolean;
}

export function grantOf(row: GrantColumns): ApiKeyGrant {
  return {
    id: row.key_id,
    expires_at: row.key_expires_at,
    models: row.key_models,
    requests_per_minute: row.key_requests_per_minute,
    monthly_spend_limit_usd: row.key_monthly_spend_limit_usd,
    disabled: row.key_disabled,
  };
}
