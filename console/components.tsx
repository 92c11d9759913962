// The few shared pieces: a message region read out by screen readers, a copy button, a
// confirmation dialog (the native <dialog>: focus is kept inside and returned), and loading state.
import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { describeError } from './api.js';

export function Notice(props: { kind: 'info' | 'ok' | 'error'; children: ComponentChildren }) {
  return (
    <div class={`notice notice-${props.kind}`} role={props.kind === 'error' ? 'alert' : 'status'}>
      {props.children}
    </div>
  );
}

export function CopyButton(props: { text: string; label: string }) {
  const [copied, setCopied] = useState<string>('');
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(props.text);
      setCopied('Copied to the clipboard.');
    } catch {
      setCopied('Could not copy: select the text and copy it yourself.');
    }
  };
  return (
    <span class="copy">
      <button type="button" onClick={() => void copy()}>
        {props.label}
      </button>
      <span class="copy-status" role="status">
        {copied}
      </span>
    </span>
  );
}

/** A modal question with a confirm and a cancel button; `onConfirm` runs only on confirm. */
export function ConfirmDialog(props: {
  open: boolean;
  title: string;
  confirmLabel: string;
  onConfirm: () => void;
  onClose: () => void;
  children: ComponentChildren;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    if (props.open && !dialog.open) dialog.showModal();
    if (!props.open && dialog.open) dialog.close();
  }, [props.open]);
  return (
    <dialog ref={ref} aria-labelledby="dialog-title" onClose={props.onClose}>
      <h2 id="dialog-title">{props.title}</h2>
      {props.children}
      <div class="actions">
        <button type="button" onClick={props.onClose}>
          Cancel
        </button>
        <button
          type="button"
          class="danger"
          onClick={() => {
            props.onConfirm();
            props.onClose();
          }}
        >
          {props.confirmLabel}
        </button>
      </div>
    </dialog>
  );
}

export interface Loaded<T> {
  data?: T;
  error?: unknown;
  loading: boolean;
  reload: () => void;
}

/** Runs `load` when `deps` change (and on reload()), keeping the last answer or error. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): Loaded<T> {
  const [state, setState] = useState<{ data?: T; error?: unknown; loading: boolean }>({ loading: true });
  const [round, setRound] = useState(0);
  useEffect(() => {
    let current = true;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => current && setState({ data, loading: false }),
      (error: unknown) => current && setState({ error, loading: false }),
    );
    return () => {
      current = false;
    };
  }, [...deps, round]);
  return { ...state, reload: () => setRound((r) => r + 1) };
}

/** Loading text, the error, or the content once there is data. */
export function Show<T>(props: { of: Loaded<T>; what: string; children: (data: T) => ComponentChildren }) {
  const { data, error, loading } = props.of;
  if (error !== undefined && data === undefined)
    return (
      <Notice kind="error">
        Could not load {props.what}: {describeError(error)}
      </Notice>
    );
  if (data === undefined) return <p class="muted">{loading ? `Loading ${props.what}…` : `No ${props.what}.`}</p>;
  return <>{props.children(data)}</>;
}

/** A wide table in a region that scrolls sideways on a phone, reachable by keyboard. */
export function TableScroll(props: { label: string; children: ComponentChildren }) {
  return (
    <div class="table-scroll" role="region" aria-label={props.label} tabIndex={0}>
      {props.children}
    </div>
  );
}
