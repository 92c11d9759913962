import { useEffect, useState } from 'preact/hooks';
import { ApiError, api, apiCall, consoleCall, describeError, signOut } from '../api.js';
import { ConfirmDialog, CopyButton, Notice } from '../components.js';
import { utcDateTime } from '../format.js';
import { navigate, useLocation } from '../router.js';
import type { SubscriptionInfo } from '../types.js';

function ShownOnce(props: { apiKey: string; heading: string }) {
  return (
    <section aria-labelledby="new-key" class="card">
      <h2 id="new-key">{props.heading}</h2>
      <p class="warning">Save it now: it will not be shown again.</p>
      <code class="secret" id="api-key">
        {props.apiKey}
      </code>
      <CopyButton text={props.apiKey} label="Copy key" />
    </section>
  );
}

export function KeyPage() {
  const { query } = useLocation();
  const [shown, setShown] = useState<{ key: string; heading: string }>();
  const [message, setMessage] = useState<{ kind: 'info' | 'error'; text: string }>();
  const [nextAllowed, setNextAllowed] = useState<Date>();
  const [confirming, setConfirming] = useState(false);
  const [busy, setBusy] = useState(false);

  // When the 2-hour limit allows the next regeneration, before anyone presses the button.
  useEffect(() => {
    api<SubscriptionInfo>('/v1/subscription/info').then(
      (info) => {
        const next = info.api_key?.next_regeneration_at;
        if (next) setNextAllowed((known) => known ?? new Date(next));
      },
      () => undefined, // the page works without it: the button's answer says the same
    );
  }, []);

  // After verification: the key made for it, once (the address bar drops ?new=1 so a reload does not ask again).
  useEffect(() => {
    if (query.get('new') !== '1') return;
    navigate('/console/key', { replace: true });
    consoleCall<{ api_key: string }>('GET', '/console/new-key').then(
      (r) => setShown({ key: r.api_key, heading: 'Your API key' }),
      (err: unknown) =>
        setMessage(
          err instanceof ApiError && err.status === 404
            ? {
                kind: 'info',
                text: 'The key from your verification was already shown. If you did not save it, regenerate one below.',
              }
            : { kind: 'error', text: describeError(err) },
        ),
    );
  }, []);

  const regenerate = async () => {
    setBusy(true);
    setMessage(undefined);
    try {
      const r = await apiCall<{ api_key: string }>('POST', '/v1/auth/regenerate-api-key');
      setShown({ key: r.body.api_key, heading: 'Your new API key' });
      const reset = Number(r.headers.get('x-ratelimit-reset'));
      if (reset > 0) setNextAllowed(new Date(Date.now() + reset * 1000));
    } catch (err) {
      if (err instanceof ApiError && err.status === 429) {
        const reset = Number(err.headers.get('x-ratelimit-reset'));
        if (reset > 0) setNextAllowed(new Date(Date.now() + reset * 1000));
      }
      setMessage({ kind: 'error', text: describeError(err) });
    } finally {
      setBusy(false);
    }
  };

  return (
    <>
      {shown && <ShownOnce apiKey={shown.key} heading={shown.heading} />}
      {message && <Notice kind={message.kind}>{message.text}</Notice>}
      <section aria-labelledby="regenerate">
        <h2 id="regenerate">Regenerate</h2>
        <p>
          A new key replaces the current one, which stops working at once: update every program that uses it. Keys can
          be regenerated once every 2 hours.
        </p>
        {nextAllowed && <p id="next-allowed">The next regeneration is allowed from {utcDateTime(nextAllowed)}.</p>}
        <button type="button" class="danger" disabled={busy} onClick={() => setConfirming(true)}>
          Regenerate key…
        </button>
      </section>
      <section aria-labelledby="sessions">
        <h2 id="sessions">Signed-in browsers</h2>
        <p>Lost a device, or signed in somewhere you should not have? This signs out every browser, this one too.</p>
        <button
          type="button"
          onClick={() =>
            void signOut(true).then(
              () => navigate('/console/sign-in'),
              (err: unknown) => setMessage({ kind: 'error', text: describeError(err) }),
            )
          }
        >
          Sign out everywhere
        </button>
      </section>
      <ConfirmDialog
        open={confirming}
        title="Regenerate your API key?"
        confirmLabel="Regenerate"
        onConfirm={() => void regenerate()}
        onClose={() => setConfirming(false)}
      >
        <p>The current key stops working at once. The new key is shown once.</p>
      </ConfirmDialog>
    </>
  );
}
