import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, api, apiCall, consoleCall, describeError } from '../api.js';
import { ConfirmDialog, CopyButton, Notice, Show, useLoad } from '../components.js';
import { count, usd, usdCents, utcDateTime } from '../format.js';
import { navigate, useLocation } from '../router.js';
import type { ApiKey, ApiKeyList, KeyUsage, ModelList, MonthUsage, SubscriptionInfo } from '../types.js';
import { KeyForm, type KeyBody } from './key-form.js';

/** A secret, shown this once, with a copy button and a warning. */
function ShownOnce(props: { apiKey: string; heading: string }) {
  const heading = useRef<HTMLHeadingElement>(null);
  // It appears after an action: focus moves to it, so a screen reader reads it next.
  useEffect(() => heading.current?.focus(), [props.apiKey]);
  return (
    <section aria-labelledby="new-key" class="card shown-once">
      <h2 id="new-key" tabIndex={-1} ref={heading}>
        {props.heading}
      </h2>
      <p class="warning">Save it now: it will not be shown again.</p>
      <code class="secret" id="api-key">
        {props.apiKey}
      </code>
      <CopyButton text={props.apiKey} label="Copy key" />
    </section>
  );
}

/** What a confirmation dialog is asking about. */
type Confirming = { kind: 'revoke'; key: ApiKey } | { kind: 'regenerate'; key: ApiKey };

const expired = (k: ApiKey): boolean => k.expires_at !== null && new Date(k.expires_at).getTime() <= Date.now();

/**
 * The account's API keys (GET /v1/keys): each with its settings and this month's spend, created,
 * changed and revoked here; the default key regenerated (once every 2 hours). A new key's secret
 * is shown once, as is the key made at verification (`?new=1`).
 */
export function KeysPage() {
  const { query } = useLocation();
  const keys = useLoad(() => api<ApiKeyList>('/v1/keys'), []);
  const models = useLoad(() => api<ModelList>('/v1/models'), []);
  // This month's spend per key, where the service gives it (`by_key`); the page works without it.
  const usage = useLoad(() => api<MonthUsage>('/v1/billing/usage'), []);
  const [shown, setShown] = useState<{ key: string; heading: string }>();
  const [said, setSaid] = useState('');
  const [error, setError] = useState<{ text: string; kind: 'info' | 'error' }>();
  // 'new' while creating, else the id of the key being edited.
  const [editing, setEditing] = useState<string>();
  const [confirming, setConfirming] = useState<Confirming>();
  const [nextAllowed, setNextAllowed] = useState<Date>();
  const [focusNext, setFocusNext] = useState<string>();
  const [, redraw] = useState(0);

  useEffect(() => {
    api<SubscriptionInfo>('/v1/subscription/info').then(
      (info) => {
        const next = info.api_key?.next_regeneration_at;
        if (next) setNextAllowed((known) => known ?? new Date(next));
      },
      () => undefined, // without it the button's answer says the same
    );
  }, []);

  // After verification: the key made for it, once (the address bar drops ?new=1 so a reload does not ask again).
  useEffect(() => {
    if (query.get('new') !== '1') return;
    navigate('/console/keys', { replace: true });
    consoleCall<{ api_key: string }>('GET', '/console/new-key').then(
      (r) => setShown({ key: r.api_key, heading: 'Your API key' }),
      (err: unknown) =>
        setError(
          err instanceof ApiError && err.status === 404
            ? {
                kind: 'info',
                text: 'The key from your verification was already shown. If you did not save it, regenerate the default key below.',
              }
            : { kind: 'error', text: describeError(err) },
        ),
    );
  }, []);

  // Regenerate comes back by itself when the 2-hour limit ends.
  useEffect(() => {
    const wait = nextAllowed ? nextAllowed.getTime() - Date.now() : 0;
    if (wait <= 0) return;
    const timer = setTimeout(() => redraw((n) => n + 1), Math.min(wait + 500, 2 ** 31 - 1));
    return () => clearTimeout(timer);
  }, [nextAllowed]);
  const regenerationHeld = nextAllowed !== undefined && nextAllowed.getTime() > Date.now();

  // After a form closes or a key goes, focus goes where the person was (once the list is drawn again).
  useEffect(() => {
    if (!focusNext || keys.loading) return;
    document.getElementById(focusNext)?.focus();
    setFocusNext(undefined);
  }, [focusNext, keys.loading, keys.data]);

  const done = (text: string, focus: string) => {
    setError(undefined);
    setSaid(text);
    setFocusNext(focus);
    keys.reload();
    usage.reload();
  };

  const create = async (body: KeyBody) => {
    const created = (await apiCall<ApiKey & { api_key: string }>('POST', '/v1/keys', body)).body;
    setEditing(undefined);
    setShown({ key: created.api_key, heading: `Your new key “${created.name}”` });
    setSaid(`Key “${created.name}” created.`);
    setError(undefined);
    keys.reload();
  };

  const change = async (key: ApiKey, body: KeyBody) => {
    const changed = (await apiCall<ApiKey>('PATCH', `/v1/keys/${key.id}`, body)).body;
    setEditing(undefined);
    done(`Key “${changed.name}” saved.`, `edit-${key.id}`);
  };

  const revoke = async (key: ApiKey) => {
    try {
      await apiCall('DELETE', `/v1/keys/${key.id}`);
      done(`Key “${key.name}” revoked: programs using it get 401 from now on.`, 'keys-heading');
    } catch (err) {
      setError({ kind: 'error', text: `Could not revoke “${key.name}”: ${describeError(err)}` });
      keys.reload();
    }
  };

  const regenerate = async () => {
    const holdFrom = (headers: Headers) => {
      const reset = Number(headers.get('x-ratelimit-reset'));
      if (reset > 0) setNextAllowed(new Date(Date.now() + reset * 1000));
    };
    try {
      const r = await apiCall<{ api_key: string }>('POST', '/v1/auth/regenerate-api-key');
      holdFrom(r.headers);
      setShown({ key: r.body.api_key, heading: 'Your new default key' });
      setSaid('Default key regenerated: the old one no longer works.');
      setError(undefined);
      keys.reload();
    } catch (err) {
      if (err instanceof ApiError && err.status === 429) holdFrom(err.headers);
      setError({ kind: 'error', text: describeError(err) });
    }
  };

  const available = models.data?.data.map((m) => m.id);
  const spent = usage.data ? spendOf(usage.data.by_key) : () => '—';

  return (
    <>
      <p>
        Give each program a key of its own: you see what each one spends, cap it, and revoke it without stopping the
        others. Every key shares your tier's rate limits and the account's spending limit.
      </p>
      {shown && <ShownOnce apiKey={shown.key} heading={shown.heading} />}
      <div class="live" role="status" aria-live="polite">
        {said && <p class="notice notice-ok">{said}</p>}
      </div>
      {error && <Notice kind={error.kind}>{error.text}</Notice>}
      <section aria-labelledby="keys-heading">
        <div class="section-head">
          <h2 id="keys-heading" tabIndex={-1}>
            Your keys
          </h2>
          <button
            type="button"
            class="primary"
            id="create-key"
            aria-expanded={editing === 'new'}
            aria-controls={editing === 'new' ? 'create-key-form' : undefined}
            onClick={() => setEditing(editing === 'new' ? undefined : 'new')}
          >
            Create a key
          </button>
        </div>
        {editing === 'new' && (
          <section id="create-key-form" aria-labelledby="create-key-title" class="card">
            <h3 id="create-key-title">New key</h3>
            {available ? (
              <KeyForm
                available={available}
                submitLabel="Create key"
                onSubmit={create}
                onCancel={() => {
                  setEditing(undefined);
                  setFocusNext('create-key');
                }}
              />
            ) : (
              <Show of={models} what="the models">
                {() => null}
              </Show>
            )}
          </section>
        )}
        <Show of={keys} what="your keys">
          {(list) =>
            list.data.length === 0 ? (
              <p id="no-keys">
                You have no API keys. Create one to call the API: the service takes it as <code>Authorization:</code>{' '}
                <code>Bearer</code> and tells each program's usage apart by it.
              </p>
            ) : (
              <>
                <ul class="key-list" aria-labelledby="keys-heading">
                  {list.data.map((key) =>
                    editing === key.id && available ? (
                      <li key={key.id} class="card key editing" aria-labelledby={`key-${key.id}-edit`}>
                        <h3 id={`key-${key.id}-edit`}>Edit “{key.name}”</h3>
                        <KeyForm
                          editing={key}
                          available={available}
                          submitLabel="Save changes"
                          onSubmit={(body) => change(key, body)}
                          onCancel={() => {
                            setEditing(undefined);
                            setFocusNext(`edit-${key.id}`);
                          }}
                        />
                      </li>
                    ) : (
                      <KeyCard
                        key={key.id}
                        apiKey={key}
                        spent={spent(key.id)}
                        regenerationHeldUntil={regenerationHeld ? nextAllowed : undefined}
                        onEdit={() => setEditing(key.id)}
                        onRevoke={() => setConfirming({ kind: 'revoke', key })}
                        onRegenerate={() => setConfirming({ kind: 'regenerate', key })}
                      />
                    ),
                  )}
                </ul>
                {list.data.every((k) => k.is_default) && (
                  <p id="only-default" class="notice notice-info">
                    Only your default key so far. Create a key for each program with <strong>Create a key</strong>{' '}
                    above: then you can see what each spends, cap it and revoke it on its own.
                  </p>
                )}
              </>
            )
          }
        </Show>
      </section>
      <ConfirmDialog
        open={confirming !== undefined}
        title={
          confirming?.kind === 'regenerate' ? 'Regenerate your default key?' : `Revoke “${confirming?.key.name ?? ''}”?`
        }
        confirmLabel={confirming?.kind === 'regenerate' ? 'Regenerate' : 'Revoke key'}
        onConfirm={() => {
          if (confirming?.kind === 'regenerate') void regenerate();
          else if (confirming) void revoke(confirming.key);
        }}
        onClose={() => setConfirming(undefined)}
      >
        {confirming?.kind === 'regenerate' ? (
          <p>
            The default key (<code>{confirming.key.redacted_value}</code>) stops working at once: update every program
            that uses it. Your other keys keep working. The new key is shown once, and the next regeneration is allowed
            2 hours later.
          </p>
        ) : (
          <p>
            Programs using <code>{confirming?.key.redacted_value}</code> get 401 from their next request. A revoked key
            cannot be restored.
          </p>
        )}
      </ConfirmDialog>
    </>
  );
}

/** Each key's spend this month from `by_key`, "$0.00" for a key without usage; "—" when the service gives none. */
function spendOf(byKey: KeyUsage[] | undefined): (keyId: string) => string {
  if (!byKey) return () => '—';
  const costs = new Map(byKey.map((k) => [k.key_id, k.cost_usd]));
  return (keyId) => usdCents(costs.get(keyId) ?? '0');
}

/** One key: its name and state, what it may do, when it was used, and what can be done with it. */
function KeyCard(props: {
  apiKey: ApiKey;
  spent: string;
  regenerationHeldUntil: Date | undefined;
  onEdit: () => void;
  onRevoke: () => void;
  onRegenerate: () => void;
}) {
  const k = props.apiKey;
  const id = `key-${k.id}`;
  const held = k.is_default && props.regenerationHeldUntil;
  return (
    <li class="card key" aria-labelledby={`${id}-name`} data-key-id={k.id}>
      <div class="key-head">
        <h3 id={`${id}-name`}>{k.name}</h3>
        {k.is_default && <span class="badge">Default</span>}
        {k.disabled && <span class="badge badge-off">Disabled</span>}
        {expired(k) && <span class="badge badge-off">Expired</span>}
      </div>
      <code class="key-value" data-field="redacted">
        {k.redacted_value}
      </code>
      <dl class="key-facts">
        <Fact label="Created" field="created">
          {utcDateTime(k.created_at)}
        </Fact>
        <Fact label="Last used" field="last-used">
          {k.last_used_at ? utcDateTime(k.last_used_at) : 'never'}
        </Fact>
        <Fact label="Expires" field="expires">
          {k.expires_at ? `${expired(k) ? 'Expired ' : ''}${utcDateTime(k.expires_at)}` : 'never'}
        </Fact>
        <Fact label="Models" field="models">
          {k.models ? k.models.join(', ') : 'All models'}
        </Fact>
        <Fact label="Requests per minute" field="rpm">
          {k.limits.requests_per_minute === null ? "Your tier's limit" : count(k.limits.requests_per_minute)}
        </Fact>
        <Fact label="Monthly spending limit" field="spend-limit">
          {k.limits.monthly_spend_limit_usd === null ? 'None' : usd(k.limits.monthly_spend_limit_usd)}
        </Fact>
        <Fact label="Spent this month" field="spent">
          {props.spent}
        </Fact>
      </dl>
      <div class="actions">
        <button type="button" id={`edit-${k.id}`} onClick={props.onEdit}>
          Edit<span class="sr-only"> “{k.name}”</span>
        </button>
        {k.is_default ? (
          <button
            type="button"
            class="danger"
            id="regenerate-key"
            disabled={Boolean(held)}
            aria-describedby={held ? 'next-allowed' : undefined}
            onClick={props.onRegenerate}
          >
            Regenerate…
          </button>
        ) : (
          <button type="button" class="danger" onClick={props.onRevoke}>
            Revoke…<span class="sr-only"> “{k.name}”</span>
          </button>
        )}
      </div>
      {held && (
        <p id="next-allowed" class="muted hint">
          Regenerated in the last 2 hours: the next regeneration is allowed from {utcDateTime(held)}.
        </p>
      )}
      {k.is_default && !held && (
        <p class="muted hint">The default key cannot be revoked: regenerate it (once every 2 hours), or disable it.</p>
      )}
    </li>
  );
}

/** A line of a key's card: its label, and its value on the right (under it, when both do not fit). */
function Fact(props: { label: string; field: string; children: ComponentChildren }) {
  return (
    <div>
      <dt>{props.label}</dt>
      <dd data-field={props.field}>{props.children}</dd>
    </div>
  );
}
