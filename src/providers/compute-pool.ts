// CPU-heavy work of a request runs on a few worker threads, never on the process's event loop,
// which serves every other job's relay, heartbeats and queue locks: the local model's JSON answers
// and tool calls (json-schema-faker, Ajv, tokenizing the answer) and the token count of a large
// prompt (with its prefixes' digests, for the local model's prompt cache). A task past its time
// budget has its thread terminated and replaced (piscina).
import { Piscina } from 'piscina';
import { countPromptTokens, INLINE_TOKENIZE_MAX_CHARS, promptChars } from './tokenizer.js';
import { promptPrefixes, type PromptPrefixes } from './local/prompt-prefixes.js';
import { imagesOf } from './messages.js';
import {
  answerProblem,
  type AnswerVerdict,
  type AnswerProblemTask,
  type PlanChoicesTask,
  type PlanChoicesResult,
  type PromptTokensTask,
  type TaskStarted,
} from './compute-tasks.js';
import type { ChatMessage, CompletionParams, JsonSchemaObject } from './types.js';

export interface ComputePoolOptions {
  /** COMPUTE_THREADS: threads in this process's pool, started on its first task. */
  threads: number;
  /** COMPUTE_THREAD_HEAP_MB: each thread's heap; a task that needs more ends its thread (a size budget). */
  threadHeapMb: number;
  /** Told when a thread fails outside any task (the pool replaces it). */
  onError: (err: unknown) => void;
}

/** Why a task was ended before it finished. */
export class ComputeLimitError extends Error {
  constructor(
    readonly limit: 'time' | 'memory',
    message: string,
  ) {
    super(message);
    this.name = 'ComputeLimitError';
  }
}

/** A prompt tokenized on the event loop: about a millisecond. */
const isSmall = (messages: readonly ChatMessage[], extras: Pick<CompletionParams, 'tools' | 'response_format'>) =>
  promptChars(messages, extras, INLINE_TOKENIZE_MAX_CHARS) <= INLINE_TOKENIZE_MAX_CHARS;

const imageUrlChars = (messages: readonly ChatMessage[]) =>
  messages.reduce((n, m) => imagesOf(m.content).reduce((k, image) => k + image.image_url.url.length, n), 0);

// Abortable tasks never share a thread (piscina), so a started task owns its thread until it ends.
const TASKS = new URL('./compute-tasks.js', import.meta.url).href;

export class ComputePool {
  private pool: Piscina | undefined;
  private nextTaskId = 0;
  /** Tasks waiting for their thread to report that it began them (the time budget starts then). */
  private readonly starting = new Map<number, () => void>();
  private closed = false;

  constructor(private readonly opts: ComputePoolOptions) {}

  /**
   * The local model's choices for a request, planned on a thread: `budgetMs` of that thread's time
   * (waiting for a free thread not counted), and `maxAnswerChars` of answer per choice.
   */
  planChoices(
    params: CompletionParams,
    limits: { budgetMs: number; maxAnswerChars: number },
    signal: AbortSignal,
  ): Promise<PlanChoicesResult> {
    return this.run<PlanChoicesResult>(
      'planChoices',
      (taskId): PlanChoicesTask => ({ taskId, params, maxAnswerChars: limits.maxAnswerChars }),
      limits.budgetMs,
      signal,
    );
  }

  /** countPromptTokens, on a thread when the prompt is large. */
  async promptTokens(messages: readonly ChatMessage[], extras: Pick<CompletionParams, 'tools' | 'response_format'>) {
    if (isSmall(messages, extras)) return countPromptTokens(messages, extras);
    return this.run<number>('promptTokens', (taskId): PromptTokensTask => ({ taskId, messages, extras }));
  }

  /** The prompt's token count and its cacheable prefixes (the local model's cache), on a thread when the prompt is large. */
  async promptPrefixes(
    messages: readonly ChatMessage[],
    extras: Pick<CompletionParams, 'tools' | 'response_format'>,
  ): Promise<PromptPrefixes> {
    // Its images' URLs are digested too (a data URL may be megabytes).
    if (isSmall(messages, extras) && imageUrlChars(messages) <= INLINE_TOKENIZE_MAX_CHARS)
      return promptPrefixes(messages, extras);
    return this.run<PromptPrefixes>('promptPrefixesTask', (taskId): PromptTokensTask => ({ taskId, messages, extras }));
  }

  /**
   * Why a strict json_schema answer is refused, or undefined when it matches (checked-output.ts):
   * on a thread when the schema and the answer are large (compiling and running the schema).
   */
  async answerProblem(schema: JsonSchemaObject, text: string, signal: AbortSignal): Promise<AnswerVerdict> {
    if (text.length + JSON.stringify(schema).length <= INLINE_TOKENIZE_MAX_CHARS) return answerProblem(schema, text);
    return this.run<AnswerVerdict>(
      'answerProblemTask',
      (taskId): AnswerProblemTask => ({ taskId, schema, text }),
      undefined,
      signal,
    );
  }

  /** How many tasks the threads have finished. */
  get completedTasks(): number {
    return this.pool?.completed ?? 0;
  }

  /** Ends every thread at once, tasks in progress included (their requests fail). */
  async close(): Promise<void> {
    this.closed = true;
    await this.pool?.destroy();
  }

  /** Starts the threads now, so the first task does not wait for them to load (a worker process, at start-up). */
  start(): void {
    this.threadsOrStart();
  }

  private threadsOrStart(): Piscina {
    if (this.closed) throw new Error('the compute pool is closed');
    if (this.pool) return this.pool;
    const pool = new Piscina({
      filename: TASKS,
      minThreads: this.opts.threads,
      maxThreads: this.opts.threads,
      resourceLimits: { maxOldGenerationSizeMb: this.opts.threadHeapMb },
      // Below the event loop's priority where the OS allows it (@napi-rs/nice, optional): on a busy
      // machine the relay and heartbeats win the CPU.
      niceIncrement: 5,
    });
    pool.on('message', (m: TaskStarted) => this.starting.get(m.started)?.());
    pool.on('error', (err) => this.opts.onError(err));
    return (this.pool = pool);
  }

  private async run<T>(
    name: string,
    task: (taskId: number) => object,
    budgetMs?: number,
    signal?: AbortSignal,
  ): Promise<T> {
    const pool = this.threadsOrStart();
    const taskId = ++this.nextTaskId;
    const controller = new AbortController();
    const stop = () => controller.abort(signal?.reason);
    signal?.addEventListener('abort', stop, { once: true });
    let timer: NodeJS.Timeout | undefined;
    let overBudget = false;
    if (budgetMs !== undefined)
      this.starting.set(taskId, () => {
        timer = setTimeout(() => {
          overBudget = true;
          controller.abort();
        }, budgetMs);
      });
    try {
      if (signal?.aborted) stop();
      return (await pool.run(task(taskId), { name, signal: controller.signal })) as T;
    } catch (err) {
      if (overBudget) throw new ComputeLimitError('time', `the task ran past its budget of ${budgetMs} ms`);
      if ((err as { code?: string }).code === 'ERR_WORKER_OUT_OF_MEMORY')
        throw new ComputeLimitError('memory', `the task needed more than ${this.opts.threadHeapMb} MB`);
      throw err;
    } finally {
      clearTimeout(timer);
      this.starting.delete(taskId);
      signal?.removeEventListener('abort', stop);
    }
  }
}
