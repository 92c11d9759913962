import { useState } from 'preact/hooks';
import { ApiError, consoleCall, describeError } from '../api.js';
import { Notice } from '../components.js';

/** Email form; the answer is the same whether or not the address has an account. */
export function SignInPage(props: { returnTo: string }) {
  const [email, setEmail] = useState('');
  const [sentTo, setSentTo] = useState('');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);

  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError('');
    try {
      await consoleCall('POST', '/console/sign-in', { email, return_to: props.returnTo });
      setSentTo(email);
    } catch (err) {
      const wait = err instanceof ApiError ? err.headers.get('retry-after') : null;
      setError(
        err instanceof ApiError && err.status === 429
          ? `Too many sign-in links were asked for. ${wait ? `Try again in ${wait} seconds.` : 'Try again later.'}`
          : describeError(err),
      );
    } finally {
      setBusy(false);
    }
  };

  if (sentTo)
    return (
      <section aria-labelledby="check-email">
        <h2 id="check-email">Check your email</h2>
        <Notice kind="ok">
          If <strong>{sentTo}</strong> has an account, a sign-in link is on its way. It works once, within 15 minutes.
        </Notice>
        <p>
          Nothing arrived? Check the spam folder, or{' '}
          <button type="button" class="link" onClick={() => setSentTo('')}>
            send another link
          </button>
          .
        </p>
      </section>
    );

  return (
    <section aria-labelledby="sign-in-form">
      <h2 id="sign-in-form">Sign in with a link by email</h2>
      <p>No password: enter the email address of your account and we send you a link that signs you in.</p>
      <form class="stack" onSubmit={(e) => void submit(e)}>
        <label for="email">Email address</label>
        {/* Not type="email": Chromium turns an internationalised domain into punycode and refuses a
            non-ASCII mailbox name with a bubble of its own. The service checks the address and says why. */}
        <input
          id="email"
          type="text"
          inputMode="email"
          autocapitalize="off"
          spellcheck={false}
          name="email"
          autocomplete="email"
          required
          value={email}
          onInput={(e) => setEmail((e.target as HTMLInputElement).value)}
        />
        <button type="submit" disabled={busy}>
          {busy ? 'Sending…' : 'Email me a sign-in link'}
        </button>
      </form>
      {error && <Notice kind="error">{error}</Notice>}
      <p>
        No account yet? <a href="/console/sign-up">Sign up</a>: it is free to start.
      </p>
    </section>
  );
}
