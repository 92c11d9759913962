// The console: one page shell, the session check, the navigation and the page for the URL.
import { render, type ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { currentSession, describeError, loadSession, onSignedOut, signOut, type Session } from './api.js';
import { Notice } from './components.js';
import { interceptLinks, navigate, useLocation } from './router.js';
import { AccountPage } from './pages/account.js';
import { BillingPage } from './pages/billing.js';
import { KeysPage } from './pages/keys.js';
import { ModelsPage } from './pages/models.js';
import { OverviewPage } from './pages/overview.js';
import { SignInPage } from './pages/sign-in.js';
import { SignUpPage } from './pages/sign-up.js';
import { UsagePage } from './pages/usage.js';

interface Page {
  title: string;
  nav?: string;
  render: (session: Extract<Session, { signed_in: true }>) => ComponentChildren;
}

const PAGES: Record<string, Page> = {
  '/console/': { title: 'Overview', nav: 'Overview', render: (s) => <OverviewPage session={s} /> },
  '/console/usage': { title: 'Usage', nav: 'Usage', render: () => <UsagePage /> },
  '/console/models': { title: 'Models', nav: 'Models', render: (s) => <ModelsPage session={s} /> },
  '/console/keys': { title: 'Keys', nav: 'Keys', render: () => <KeysPage /> },
  '/console/billing': { title: 'Billing', nav: 'Billing', render: (s) => <BillingPage session={s} /> },
  '/console/account': { title: 'Account', nav: 'Account', render: (s) => <AccountPage session={s} /> },
};
/** Pages that moved: the old address keeps working (verification still lands on /console/key?new=1). */
const MOVED: Record<string, string> = { '/console/key': '/console/keys' };
const SIGN_IN = '/console/sign-in';
const SIGN_UP = '/console/sign-up';
/** The pages for people who are not signed in, and their titles. */
const SIGNED_OUT_PAGES: Record<string, string> = { [SIGN_IN]: 'Sign in', [SIGN_UP]: 'Sign up' };

/** Same-origin console paths only: a return path never leads elsewhere. */
const safeReturn = (to: string | null): string =>
  to && to.startsWith('/console/') && !to.startsWith('//') && !to.startsWith(SIGN_IN) && !to.startsWith(SIGN_UP)
    ? to
    : '/console/';

function App() {
  const location = useLocation();
  const [session, setSession] = useState<Session | undefined>(currentSession());
  const [failure, setFailure] = useState<unknown>();
  const [flash, setFlash] = useState('');
  const heading = useRef<HTMLHeadingElement>(null);
  const first = useRef(true);

  useEffect(() => {
    loadSession().then(setSession, setFailure);
    return onSignedOut(() => setSession(currentSession()));
  }, []);

  const signedIn = session?.signed_in === true;
  const asked = location.path === '/console' ? '/console/' : location.path;
  const path = MOVED[asked] ?? asked;
  const page = PAGES[path];

  // A moved page's old address is replaced by its new one, the query kept.
  useEffect(() => {
    if (MOVED[asked]) navigate(path + window.location.search, { replace: true });
  }, [asked]);

  // Signed out: every page but sign-in and sign-up leads to sign-in, remembering where it was going.
  const signedOutPage = SIGNED_OUT_PAGES[path];
  useEffect(() => {
    if (!session || !session.jwt_available) return;
    if (!session.signed_in && !signedOutPage)
      navigate(`${SIGN_IN}?return_to=${encodeURIComponent(path + window.location.search)}`, { replace: true });
    if (session.signed_in && signedOutPage) navigate(safeReturn(location.query.get('return_to')), { replace: true });
  }, [session, path]);

  const title = !session ? 'Console' : (signedOutPage ?? page?.title ?? 'Page not found');
  // A route change moves focus to the new page's heading, so a screen reader starts there.
  useEffect(() => {
    document.title = `${title} · Console`;
    if (first.current) {
      first.current = false;
      return;
    }
    heading.current?.focus();
  }, [path, title]);

  const doSignOut = async () => {
    try {
      await signOut();
      setFlash('You are signed out.');
      navigate(SIGN_IN);
    } catch (err) {
      setFlash(`Could not sign out: ${describeError(err)}`);
    }
  };

  let content: ComponentChildren;
  if (failure !== undefined)
    content = <Notice kind="error">The console could not start: {describeError(failure)}</Notice>;
  else if (!session) content = <p class="muted">Loading…</p>;
  else if (!session.jwt_available)
    content = (
      <Notice kind="info">
        The console is off on this service: its operator signs people in with an outside identity provider (JWKS), so
        this service cannot issue the tokens the console needs. Use your organisation's own dashboard, or the API with
        your key.
      </Notice>
    );
  else if (path === SIGN_IN)
    content = (
      <>
        {location.query.get('closed') === '1' && (
          <Notice kind="ok">
            Your account is closed and you are signed out. Its API keys no longer work and your personal data is erased.
            If usage was still to be invoiced, the final invoice comes by email.
          </Notice>
        )}
        <SignInPage returnTo={safeReturn(location.query.get('return_to'))} />
      </>
    );
  else if (path === SIGN_UP) content = <SignUpPage />;
  else if (!signedIn) content = <p class="muted">Taking you to sign in…</p>;
  else if (!page)
    content = (
      <p>
        There is no such page. Go to the <a href="/console/">overview</a>.
      </p>
    );
  else content = page.render(session);

  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href="/console/">
          Completions console
        </a>
        {signedIn && (
          <nav aria-label="Console">
            <ul>
              {Object.entries(PAGES).map(([href, p]) => (
                <li key={href}>
                  <a href={href} aria-current={href === path ? 'page' : undefined}>
                    {p.nav}
                  </a>
                </li>
              ))}
            </ul>
          </nav>
        )}
        {signedIn && (
          <div class="who">
            <AccountAddress email={session.account.email} />
            <button type="button" onClick={() => void doSignOut()}>
              Sign out
            </button>
          </div>
        )}
      </header>
      <main id="main">
        <h1 tabIndex={-1} ref={heading}>
          {title}
        </h1>
        <div class="flash" role="status" aria-live="polite">
          {flash && <p>{flash}</p>}
        </div>
        {content}
      </main>
      <footer class="foot">
        <p>
          Times and days are UTC. <a href="/docs">API documentation</a>
        </p>
      </footer>
    </>
  );
}

const root = document.getElementById('app')!;
interceptLinks(root);
render(<App />, root);

/**
 * The signed-in address, breakable only at its @: on a narrow screen the domain goes to a line of
 * its own, and a part longer than the line ends in an ellipsis (the whole address is the title and
 * stays in the text for screen readers and copying).
 */
function AccountAddress(props: { email: string }) {
  const at = props.email.lastIndexOf('@');
  return (
    <span class="email" title={props.email}>
      <span>{props.email.slice(0, at)}</span>
      <span>{props.email.slice(at)}</span>
    </span>
  );
}
