import type { Obj } from './objects.js';

/** Which requests a rule applies to, and how many more times. */
interface Rule {
  remaining: number;
  method?: string;
  path?: RegExp;
}

export interface FailureOptions {
  status?: number;
  method?: string;
  path?: RegExp;
  error?: Obj;
}

/**
 * Outages a test asks for: the next matching requests fail with an error body or never get an
 * answer. A request takes one use from the first rule that matches it, in the order rules were added.
 */
export class Faults {
  private readonly failures: (Rule & { status?: number; error?: Obj })[] = [];
  private readonly hangs: Rule[] = [];

  failNext(count: number, opts: FailureOptions = {}): void {
    this.failures.push({ remaining: count, ...opts });
  }

  hangNext(count: number, opts: { method?: string; path?: RegExp } = {}): void {
    this.hangs.push({ remaining: count, ...opts });
  }

  takeHang(method: string, path: string): boolean {
    return take(this.hangs, method, path) !== undefined;
  }

  /** The injected answer for this request, if a failure rule matches it. */
  takeFailure(method: string, path: string): { status: number; body: Obj } | undefined {
    const failure = take(this.failures, method, path);
    if (!failure) return undefined;
    return {
      status: failure.status ?? 500,
      body: {
        error: failure.error ?? { type: 'api_error', message: 'An unknown error occurred (injected by the fake).' },
      },
    };
  }
}

function take<R extends Rule>(rules: R[], method: string, path: string): R | undefined {
  const rule = rules.find(
    (r) => r.remaining > 0 && (!r.method || r.method === method) && (!r.path || r.path.test(path)),
  );
  if (rule) rule.remaining -= 1;
  return rule;
}
