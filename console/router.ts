// Client-side routing under /console/: each page is a real URL (the server answers every one with
// the same shell), history entries for back and forward, and the query string holds page state.
import { useEffect, useState } from 'preact/hooks';

export interface Location {
  path: string;
  query: URLSearchParams;
}

const listeners = new Set<() => void>();
const read = (): Location => ({ path: window.location.pathname, query: new URLSearchParams(window.location.search) });

export function navigate(to: string, opts: { replace?: boolean } = {}): void {
  if (opts.replace) window.history.replaceState(null, '', to);
  else window.history.pushState(null, '', to);
  for (const l of listeners) l();
}

window.addEventListener('popstate', () => {
  for (const l of listeners) l();
});

export function useLocation(): Location {
  const [location, setLocation] = useState(read);
  useEffect(() => {
    const update = () => setLocation(read());
    listeners.add(update);
    return () => void listeners.delete(update);
  }, []);
  return location;
}

/** Same-origin links under /console/ are followed without a page load (unless a modifier key asks for a new tab). */
export function interceptLinks(root: HTMLElement): void {
  root.addEventListener('click', (event) => {
    if (
      event.defaultPrevented ||
      event.button !== 0 ||
      event.metaKey ||
      event.ctrlKey ||
      event.shiftKey ||
      event.altKey
    )
      return;
    const a = (event.target as Element | null)?.closest('a');
    if (!a || a.target || a.hasAttribute('download')) return;
    const url = new URL(a.href, window.location.href);
    if (url.origin !== window.location.origin || !url.pathname.startsWith('/console/')) return;
    event.preventDefault();
    navigate(url.pathname + url.search);
  });
}
