/** What a scheduled job function takes besides the app (whose clock it uses) and its period. */
export interface JobOptions {
  /** Only these accounts (an operator's targeted re-run, or a test's own accounts). */
  accounts?: string[];
  /** Do the work in this process rather than hand it to the workers (run-job --here). */
  inProcess?: boolean;
  /** One line per account for run-job's stdout. */
  progress?: (line: string) => void;
  /**
   * Called before each account: throws when the run must stop (the scheduler is shutting down,
   * or the run's claim was lost), so a run never continues without holding its claim.
   */
  checkpoint?: () => Promise<void>;
}

export interface JobResult {
  /** False when some account failed; the run is recorded as failed and retried. */
  ok: boolean;
  summary: Record<string, unknown>;
}
