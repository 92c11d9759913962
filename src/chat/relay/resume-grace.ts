import type { RedisClient } from '../../infra/redis.js';
import { readersAlive } from './readers.js';
import type { RelayPublisher } from './publisher.js';
import { requestStateKey } from './protocol.js';

/** What the grace period needs of a running job (run-job.ts's RunningJob). */
export interface GraceJob {
  controller: AbortController;
  relayTo: string;
  resumable: boolean;
  /** A background response: it runs to its end with or without readers; only a cancel stops it. */
  background?: boolean;
  /** Its client left: messages go only to the relay log (set before the publisher exists, too). */
  detached?: boolean;
  publisher?: RelayPublisher;
  graceTimer?: NodeJS.Timeout;
}

/**
 * A worker's side of resumable streams. When a reader of a resumable request leaves (its client's
 * connection, or a resumed stream) or the web process holding its client is gone, the request runs
 * on; after the grace period it is cancelled, billing what was produced, unless a reader on a live
 * web process is counted in its state by then. A request that is not resumable is never here: its
 * client's disconnect cancels it at once.
 */
export class ResumeGrace {
  constructor(
    private readonly deps: {
      redis: RedisClient;
      prefix: string;
      graceMs: number;
      /** A missing liveness key means its process is gone only on a connection up long enough (liveness.ts). */
      settled: () => boolean;
      onExpired: (requestId: string) => void;
    },
  ) {}

  /** A reader left, or the client's web process is gone: starts the grace period unless one is running. */
  detached(requestId: string, job: GraceJob): void {
    if (!job.resumable || job.controller.signal.aborted) return;
    job.detached = true;
    job.publisher?.stopPublishing();
    if (job.graceTimer || job.background) return;
    job.graceTimer = setTimeout(() => void this.expire(requestId, job), this.deps.graceMs);
    job.graceTimer.unref();
  }

  private async expire(requestId: string, job: GraceJob): Promise<void> {
    job.graceTimer = undefined;
    if (job.controller.signal.aborted) return;
    let readers: boolean | undefined;
    try {
      if (this.deps.settled())
        readers = await readersAlive(
          this.deps.redis,
          this.deps.prefix,
          requestStateKey(this.deps.prefix, job.relayTo, requestId),
        );
    } catch {
      readers = undefined;
    }
    // Unsure (Redis away, or just back and its liveness keys not yet rewritten): nothing is
    // cancelled without knowing; look again after another grace period.
    if (readers === undefined) return this.detached(requestId, job);
    // Readers keep it running; the last of them to leave starts a new grace period.
    if (readers) return;
    this.deps.onExpired(requestId);
    job.controller.abort('resume_grace_expired');
  }
}
