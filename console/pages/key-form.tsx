import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, describeError } from '../api.js';
import { Notice } from '../components.js';
import { addDays, isoDay } from '../format.js';
import type { ApiKey } from '../types.js';

/** What POST /v1/keys and PATCH /v1/keys/{id} take; an edit sends only what changed. */
export interface KeyBody {
  name?: string;
  models?: string[] | null;
  limits?: { requests_per_minute?: number | null; monthly_spend_limit_usd?: string | null };
  expires_at?: string | null;
  disabled?: boolean;
}

type Field = 'name' | 'models' | 'rpm' | 'spend' | 'expires' | 'disabled';
/** The fields in the order they are drawn: the first at fault takes focus. */
const ORDER: Field[] = ['name', 'models', 'rpm', 'spend', 'expires', 'disabled'];
const inputId = (f: Field): string => `key-${f}`;

/** Where a 422's `loc` points, as a field of this form. */
function fieldOf(loc: (string | number)[]): Field | undefined {
  const [, first, second] = loc;
  if (first === 'name' || first === 'models' || first === 'disabled') return first;
  if (first === 'expires_at') return 'expires';
  if (first === 'limits' && second === 'requests_per_minute') return 'rpm';
  if (first === 'limits' && second === 'monthly_spend_limit_usd') return 'spend';
  return undefined;
}

const sentence = (msg: string): string => msg.charAt(0).toUpperCase() + msg.slice(1);

interface Values {
  name: string;
  models: string[];
  rpm: string;
  spend: string;
  expires: string;
  disabled: boolean;
}

function initialValues(key: ApiKey | undefined, available: string[]): Values {
  return {
    name: key?.name ?? '',
    models: key?.models ?? available,
    rpm: key?.limits.requests_per_minute?.toString() ?? '',
    spend: key?.limits.monthly_spend_limit_usd ?? '',
    expires: key?.expires_at?.slice(0, 10) ?? '',
    disabled: key?.disabled ?? false,
  };
}

/** "$25" and "25.5" -> "25.50"; undefined when it is not an amount in dollars and cents. */
function dollars(typed: string): string | undefined {
  const m = /^\$?\s*(\d+)(?:\.(\d{1,2}))?$/.exec(typed.trim());
  if (!m) return undefined;
  return `${m[1]!.replace(/^0+(?=\d)/, '')}.${(m[2] ?? '').padEnd(2, '0')}`;
}

/**
 * The body for the values, or the fields at fault. Every model ticked means every model of the
 * tier (null), so models added to the tier later are allowed too. An edit sends only what changed,
 * so a key that has expired can still be renamed.
 */
function bodyOf(
  values: Values,
  available: string[],
  key: ApiKey | undefined,
): { body: KeyBody } | { errors: Partial<Record<Field, string>> } {
  const errors: Partial<Record<Field, string>> = {};
  const all = available.length > 0 && available.every((m) => values.models.includes(m));
  const models = all ? null : values.models;
  if (values.models.length === 0) errors.models = 'Tick at least one model.';
  let rpm: number | null = null;
  if (values.rpm.trim() !== '') {
    if (/^\d+$/.test(values.rpm.trim())) rpm = Number(values.rpm.trim());
    else errors.rpm = 'Enter a whole number of requests, or leave it empty.';
  }
  let spend: string | null = null;
  if (values.spend.trim() !== '') {
    const amount = dollars(values.spend);
    if (amount === undefined) errors.spend = 'Enter an amount in dollars, such as 25 or 12.50, or leave it empty.';
    // Past the schema's seven digits the service's answer would quote its pattern: say it plainly.
    else if (amount.length > 10) errors.spend = 'Enter at most 1000000.';
    else spend = amount;
  }
  if (Object.keys(errors).length > 0) return { errors };

  const expires = values.expires === '' ? null : `${values.expires}T00:00:00Z`;
  const sameModels = (a: string[] | null, b: string[] | null) =>
    a === null || b === null ? a === b : a.length === b.length && a.every((m) => b.includes(m));
  const body: KeyBody = {};
  const limits: NonNullable<KeyBody['limits']> = {};
  if (!key || values.name.trim() !== key.name) body.name = values.name.trim();
  if (!key || !sameModels(models, key.models)) body.models = models;
  if (!key || rpm !== key.limits.requests_per_minute) limits.requests_per_minute = rpm;
  if (!key || spend !== key.limits.monthly_spend_limit_usd) limits.monthly_spend_limit_usd = spend;
  if (Object.keys(limits).length > 0) body.limits = limits;
  if (!key || values.expires !== (key.expires_at?.slice(0, 10) ?? '')) body.expires_at = expires;
  if (key && values.disabled !== key.disabled) body.disabled = values.disabled;
  return { body };
}

/**
 * A key's settings, to create one or change one (`editing`): its name, the models it may use (a
 * checklist of the tier's), its own limits and expiry, and (when editing) whether it is disabled.
 * The service's 422s are shown at their fields, the first at fault focused.
 */
export function KeyForm(props: {
  editing?: ApiKey;
  /** The ids of the tier's models (GET /v1/models). */
  available: string[];
  submitLabel: string;
  onSubmit: (body: KeyBody) => Promise<void>;
  onCancel: () => void;
}) {
  const { editing, available } = props;
  // A key may name a model its tier no longer offers (after a downgrade): it stays on the list.
  const choices = [...available, ...(editing?.models ?? []).filter((m) => !available.includes(m))];
  const [values, setValues] = useState<Values>(() => initialValues(editing, available));
  const [errors, setErrors] = useState<Partial<Record<Field, string>>>({});
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const form = useRef<HTMLFormElement>(null);

  // The form takes focus when it opens, and the first field at fault once errors are drawn.
  useEffect(() => {
    form.current?.querySelector<HTMLInputElement>(`#${inputId('name')}`)?.focus();
  }, []);
  useEffect(() => {
    const first = ORDER.find((f) => errors[f]);
    if (first) form.current?.querySelector<HTMLInputElement>(`#${inputId(first)}`)?.focus();
  }, [errors]);

  const set = <K extends keyof Values>(field: K, value: Values[K]) => setValues((v) => ({ ...v, [field]: value }));

  const submit = async (event: Event) => {
    event.preventDefault();
    setError('');
    const made = bodyOf(values, available, editing);
    if ('errors' in made) {
      setErrors(made.errors);
      return;
    }
    setErrors({});
    setBusy(true);
    try {
      await props.onSubmit(made.body);
    } catch (err) {
      const byField: Partial<Record<Field, string>> = {};
      let unplaced = '';
      if (err instanceof ApiError && err.status === 422)
        for (const issue of err.detail) {
          const field = fieldOf(issue.loc);
          if (field) byField[field] ??= sentence(issue.msg);
          else unplaced ||= sentence(issue.msg);
        }
      setErrors(byField);
      setError(unplaced || (Object.keys(byField).length > 0 ? '' : describeError(err)));
      setBusy(false);
    }
  };

  /** The attributes that tie a field to its hint and error. */
  const describedBy = (f: Field, hint: boolean) => {
    const ids = [hint && `${inputId(f)}-hint`, errors[f] && `${inputId(f)}-error`].filter(Boolean).join(' ');
    return { 'aria-describedby': ids || undefined, 'aria-invalid': errors[f] ? ('true' as const) : undefined };
  };
  const fieldError = (f: Field) =>
    errors[f] && (
      <p id={`${inputId(f)}-error`} class="field-error">
        {errors[f]}
      </p>
    );

  return (
    <form class="stack key-form" ref={form} noValidate onSubmit={(e) => void submit(e)}>
      <div class="field">
        <label for={inputId('name')}>Name</label>
        <input
          id={inputId('name')}
          type="text"
          required
          maxLength={100}
          autocomplete="off"
          value={values.name}
          {...describedBy('name', true)}
          onInput={(e) => set('name', (e.target as HTMLInputElement).value)}
        />
        <p id={`${inputId('name')}-hint`} class="muted hint">
          What the key is for, such as the program that holds it.
        </p>
        {fieldError('name')}
      </div>
      <fieldset class="field checklist" aria-describedby={describedBy('models', true)['aria-describedby']}>
        <legend>Models</legend>
        <p id={`${inputId('models')}-hint`} class="muted hint">
          With every model ticked the key may use all of your tier's, those added later too.
        </p>
        {choices.length === 0 && <p class="muted">Your tier has no models on this service.</p>}
        {choices.map((m, i) => (
          <label key={m} class="check">
            <input
              type="checkbox"
              name={inputId('models')}
              {...(i === 0 ? { id: inputId('models') } : {})}
              value={m}
              checked={values.models.includes(m)}
              onChange={(e) =>
                set(
                  'models',
                  (e.target as HTMLInputElement).checked ? [...values.models, m] : values.models.filter((x) => x !== m),
                )
              }
            />
            <code>{m}</code>
            {!available.includes(m) && <span class="muted"> (not on your tier)</span>}
          </label>
        ))}
        {fieldError('models')}
      </fieldset>
      <div class="field">
        <label for={inputId('rpm')}>Requests per minute (optional)</label>
        <input
          id={inputId('rpm')}
          type="text"
          inputMode="numeric"
          autocomplete="off"
          value={values.rpm}
          {...describedBy('rpm', true)}
          onInput={(e) => set('rpm', (e.target as HTMLInputElement).value)}
        />
        <p id={`${inputId('rpm')}-hint`} class="muted hint">
          Empty for none of its own: your tier's limits apply to all your keys together.
        </p>
        {fieldError('rpm')}
      </div>
      <div class="field">
        <label for={inputId('spend')}>Monthly spending limit in USD (optional)</label>
        <input
          id={inputId('spend')}
          type="text"
          inputMode="decimal"
          autocomplete="off"
          value={values.spend}
          {...describedBy('spend', true)}
          onInput={(e) => set('spend', (e.target as HTMLInputElement).value)}
        />
        <p id={`${inputId('spend')}-hint`} class="muted hint">
          Past it the key gets 429 until the 1st (UTC). The account's own limit still applies.
        </p>
        {fieldError('spend')}
      </div>
      <div class="field">
        <label for={inputId('expires')}>Expires on (optional)</label>
        <input
          id={inputId('expires')}
          type="date"
          min={addDays(isoDay(new Date()), 1)}
          value={values.expires}
          {...describedBy('expires', true)}
          onInput={(e) => set('expires', (e.target as HTMLInputElement).value)}
        />
        <p id={`${inputId('expires')}-hint`} class="muted hint">
          The key stops working at 00:00 UTC that day. Empty for never.
        </p>
        {fieldError('expires')}
      </div>
      {editing && (
        <div class="field">
          <label class="check">
            <input
              id={inputId('disabled')}
              type="checkbox"
              checked={values.disabled}
              {...describedBy('disabled', true)}
              onChange={(e) => set('disabled', (e.target as HTMLInputElement).checked)}
            />
            Disabled
          </label>
          <p id={`${inputId('disabled')}-hint`} class="muted hint">
            A disabled key is refused (401) until enabled again.
          </p>
          {fieldError('disabled')}
        </div>
      )}
      {error && <Notice kind="error">{error}</Notice>}
      <div class="actions">
        <button type="submit" class="primary" disabled={busy}>
          {busy ? 'Saving…' : props.submitLabel}
        </button>
        <button type="button" onClick={props.onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}
