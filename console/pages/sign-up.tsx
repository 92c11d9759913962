import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, describeError, publicCall } from '../api.js';
import { Notice } from '../components.js';

type Field = 'name' | 'email' | 'organization';

const FIELDS: { id: Field; label: string; autocomplete: string; help?: string }[] = [
  { id: 'name', label: 'Your name', autocomplete: 'name' },
  { id: 'email', label: 'Email address', autocomplete: 'email', help: 'The link that verifies it comes here.' },
  { id: 'organization', label: 'Organisation', autocomplete: 'organization' },
];

/** The 422's problems by field (`loc` is ["body", field]); anything else goes to the form's message. */
function fieldErrors(err: ApiError): Partial<Record<Field, string>> {
  const out: Partial<Record<Field, string>> = {};
  for (const issue of err.detail) {
    const field = issue.loc[1];
    if ((field === 'name' || field === 'email' || field === 'organization') && !out[field])
      out[field] = issue.msg.charAt(0).toUpperCase() + issue.msg.slice(1);
  }
  return out;
}

/**
 * Sign-up in the browser: POST /v1/auth/signup, as any client does. The emailed link verifies the
 * address, signs the person in here and shows the API key once. The answer never says whether the
 * address already had an account (the email does).
 */
export function SignUpPage() {
  const [values, setValues] = useState<Record<Field, string>>({ name: '', email: '', organization: '' });
  const [errors, setErrors] = useState<Partial<Record<Field, string>>>({});
  const [error, setError] = useState('');
  const [sentTo, setSentTo] = useState('');
  const [busy, setBusy] = useState(false);
  const form = useRef<HTMLFormElement>(null);

  // Once the errors are drawn, the first field at fault takes focus, so its message is read out with it.
  useEffect(() => {
    const first = FIELDS.find((f) => errors[f.id]);
    if (first) form.current?.querySelector<HTMLInputElement>(`#${first.id}`)?.focus();
  }, [errors]);

  const submit = async (event?: Event) => {
    event?.preventDefault();
    setBusy(true);
    setError('');
    setErrors({});
    try {
      await publicCall('POST', '/v1/auth/signup', values);
      setSentTo(values.email);
    } catch (err) {
      const byField = err instanceof ApiError && err.status === 422 ? fieldErrors(err) : {};
      if (Object.keys(byField).length > 0) setErrors(byField);
      else if (err instanceof ApiError && err.status === 429) {
        const wait = err.headers.get('retry-after');
        setError(`Too many sign-ups were asked for. ${wait ? `Try again in ${wait} seconds.` : 'Try again later.'}`);
      } else setError(describeError(err));
    } finally {
      setBusy(false);
    }
  };

  if (sentTo)
    return (
      <section aria-labelledby="check-email">
        <h2 id="check-email">Check your email</h2>
        <Notice kind="ok">
          A link is on its way to <strong>{sentTo}</strong>. Open it to verify the address: it signs you in here and
          shows your API key, once.
        </Notice>
        <p>If the address already has an account, the email says so instead, and you can sign in.</p>
        <p>
          Nothing arrived? Check the spam folder, or{' '}
          <button type="button" class="link" disabled={busy} onClick={() => void submit()}>
            send the link again
          </button>
          .
        </p>
        {error && <Notice kind="error">{error}</Notice>}
        <p>
          <a href="/console/sign-in">Sign in</a> ·{' '}
          <button type="button" class="link" onClick={() => setSentTo('')}>
            Sign up with another address
          </button>
        </p>
      </section>
    );

  return (
    <section aria-labelledby="sign-up-form">
      <h2 id="sign-up-form">Create an account</h2>
      <p>Free to start: three models within the free tier's limits, no card needed. Upgrade whenever you like.</p>
      <form class="stack" ref={form} noValidate onSubmit={(e) => void submit(e)}>
        {FIELDS.map((f) => {
          const described = [f.help && `${f.id}-help`, errors[f.id] && `${f.id}-error`].filter(Boolean).join(' ');
          return (
            <div class="field" key={f.id}>
              <label for={f.id}>{f.label}</label>
              {/* Not type="email", as on the sign-in page: the service checks the address and says why. */}
              <input
                id={f.id}
                name={f.id}
                type="text"
                {...(f.id === 'email' ? { inputMode: 'email', autocapitalize: 'off', spellcheck: false } : {})}
                autocomplete={f.autocomplete}
                required
                maxLength={f.id === 'email' ? 254 : 100}
                aria-invalid={errors[f.id] ? 'true' : undefined}
                aria-describedby={described || undefined}
                value={values[f.id]}
                onInput={(e) => setValues((v) => ({ ...v, [f.id]: (e.target as HTMLInputElement).value }))}
              />
              {f.help && (
                <p id={`${f.id}-help`} class="muted hint">
                  {f.help}
                </p>
              )}
              {errors[f.id] && (
                <p id={`${f.id}-error`} class="field-error">
                  {errors[f.id]}
                </p>
              )}
            </div>
          );
        })}
        <button type="submit" class="primary" disabled={busy}>
          {busy ? 'Signing up…' : 'Sign up'}
        </button>
      </form>
      {error && <Notice kind="error">{error}</Notice>}
      <p>
        Already have an account? <a href="/console/sign-in">Sign in</a>.
      </p>
    </section>
  );
}
