import { useState } from 'preact/hooks';
import { apiCall, describeError, markSignedOut, signOut, type Account } from '../api.js';
import { Notice } from '../components.js';
import { navigate } from '../router.js';

/** The account's details, signing out everywhere and, at the end, closing it with the address typed as confirmation. */
export function AccountPage(props: { session: { account: Account } }) {
  const { account } = props.session;
  return (
    <>
      <section aria-labelledby="details" class="card">
        <h2 id="details">Details</h2>
        <dl class="pairs">
          <dt>Name</dt>
          <dd>{account.name}</dd>
          <dt>Email</dt>
          <dd>
            <Address email={account.email} />
          </dd>
          <dt>Organisation</dt>
          <dd>{account.organization}</dd>
          <dt>Tier</dt>
          <dd>{account.tier === 'paid' ? 'Paid (pay as you go)' : 'Free'}</dd>
        </dl>
      </section>
      <SignOutEverywhere />
      <CloseAccount email={account.email} tier={account.tier} />
    </>
  );
}

function SignOutEverywhere() {
  const [error, setError] = useState('');
  return (
    <section aria-labelledby="sessions" class="card">
      <h2 id="sessions">Signed-in browsers</h2>
      <p>Lost a device, or signed in somewhere you should not have? This signs out every browser, this one too.</p>
      <button
        type="button"
        onClick={() =>
          void signOut(true).then(
            () => navigate('/console/sign-in'),
            (err: unknown) => setError(describeError(err)),
          )
        }
      >
        Sign out everywhere
      </button>
      {error && <Notice kind="error">{error}</Notice>}
    </section>
  );
}

function CloseAccount(props: { email: string; tier: Account['tier'] }) {
  const [typed, setTyped] = useState('');
  const [mismatch, setMismatch] = useState(false);
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);

  const submit = async (event: Event) => {
    event.preventDefault();
    setError('');
    // The service checks it too (422); asking here first keeps a typo from costing a round trip.
    if (typed.trim().toLowerCase() !== props.email.toLowerCase()) {
      setMismatch(true);
      document.getElementById('confirm-email')?.focus();
      return;
    }
    setMismatch(false);
    setBusy(true);
    try {
      await apiCall('POST', '/v1/account/close', { confirm_email: typed });
      markSignedOut();
      navigate('/console/sign-in?closed=1');
    } catch (err) {
      setError(describeError(err));
      setBusy(false);
    }
  };

  return (
    <section aria-labelledby="close-account" class="card danger-zone">
      <h2 id="close-account">Close account</h2>
      <p>Closing the account cannot be undone. At once:</p>
      <ul>
        <li>every API key of the account stops working: programs using one get 401;</li>
        {props.tier === 'paid' && (
          <li>
            the paid subscription is cancelled, and usage not yet invoiced goes on a final invoice, sent by email;
          </li>
        )}
        <li>every browser signed in to this console is signed out;</li>
        <li>
          your name, organisation and email address are erased, with the responses stored for you. Invoices already
          issued are kept, as the law requires, with the billing details they were issued to.
        </li>
      </ul>
      <p>Requests still running finish and are billed. The address can sign up again later, as a new account.</p>
      <form class="stack" onSubmit={(e) => void submit(e)} noValidate>
        <label for="confirm-email">
          To confirm, type your email address:{' '}
          <strong>
            <Address email={props.email} />
          </strong>
        </label>
        <input
          id="confirm-email"
          type="text"
          inputMode="email"
          autocapitalize="off"
          autocomplete="off"
          spellcheck={false}
          required
          value={typed}
          aria-invalid={mismatch ? 'true' : undefined}
          aria-describedby={mismatch ? 'confirm-email-error' : undefined}
          onInput={(e) => {
            setTyped((e.target as HTMLInputElement).value);
            setMismatch(false);
          }}
        />
        {mismatch && (
          <p id="confirm-email-error" class="field-error">
            That is not the address of this account. Type it exactly as shown above.
          </p>
        )}
        <button type="submit" class="danger" disabled={busy}>
          {busy ? 'Closing…' : 'Close account'}
        </button>
      </form>
      {error && <Notice kind="error">{error}</Notice>}
    </section>
  );
}

/** An address that may wrap only after its @ on a narrow screen (and anywhere in a part longer than the line). */
function Address(props: { email: string }) {
  const at = props.email.lastIndexOf('@');
  return (
    <span class="break">
      {props.email.slice(0, at)}
      <wbr />
      {props.email.slice(at)}
    </span>
  );
}
