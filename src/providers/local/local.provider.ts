import { setImmediate as nextTurn } from 'node:timers/promises';
import { sleep, type Clock } from '../../clock.js';
import { AppError } from '../../errors.js';
import { abortError } from '../abort.js';
import { ComputeLimitError, type ComputePool } from '../compute-pool.js';
import { countTokens, TOKENS_PER_TOOL } from '../tokenizer.js';
import type { UpstreamEvent, CompletionParams, Provider } from '../types.js';
import { checkLocalRequest } from './local.rules.js';
import { planChoice, type PlannedChoice } from './local-answer.js';
import { PromptCache } from './prompt-cache.js';

export interface LocalModelOptions {
  /** Delay before the first token. 0 means "next turn of the event loop", no timer. */
  ttftMs: number;
  /** Tokens per second per choice once streaming. */
  tokensPerSecond: number;
  /** Thread time a request's JSON answers (or tool calls) may take to write, all choices together. */
  generationBudgetMs: number;
  /** The longest JSON answer or tool call arguments it writes, in characters. */
  maxAnswerChars: number;
}

export const LOCAL_MODEL_FINGERPRINT = 'local-model-v1';

// ---- pacing --------------------------------------------------------------------------------

async function pause(ms: number, signal: AbortSignal): Promise<void> {
  // ms rounds down to 0 at high rates: yield to the event loop without a timer.
  if (ms < 1) await nextTurn(undefined, { signal }).catch(() => undefined);
  else await sleep(ms, signal);
  if (signal.aborted) throw abortError();
}

/**
 * The built-in model: deterministic answers, paced like a real model. All choices stream in
 * parallel, interleaved; each timer tick emits every token that is due, merged into one delta per
 * choice, so a very high tokens-per-second rate costs a few ticks per answer, not one per token.
 * temperature, top_p, penalties, logit_bias, user and reasoning_effort are accepted and have no
 * effect (it does not think: its usage has no reasoning tokens). It caches prompt prefixes as
 * OpenAI does (prompt-cache.ts), per request scope (the account) and model, in this process only.
 */
export class LocalProvider implements Provider {
  readonly name = 'local';
  readonly fingerprint = LOCAL_MODEL_FINGERPRINT;
  private readonly promptCache: PromptCache;

  /**
   * `rules`: what requests to refuse. Standing in for another provider's model (MODEL_BACKEND=local),
   * that provider's rules, so a request that works offline works in production too. Its own
   * default: the roles every adapter understands; every other field is honoured or has no effect.
   */
  constructor(
    private readonly opts: LocalModelOptions,
    private readonly compute: ComputePool,
    clock: Clock,
    private readonly rules: (params: CompletionParams) => void = checkLocalRequest,
  ) {
    this.promptCache = new PromptCache(clock);
  }

  check(params: CompletionParams): void {
    this.rules(params);
  }

  async *stream(params: CompletionParams, signal: AbortSignal): AsyncIterable<UpstreamEvent> {
    if (signal.aborted) throw abortError();
    const n = params.n ?? 1;
    const choices = await this.plan(params, signal);
    const prompt = await this.promptTokens(params);
    const msPerToken = 1000 / this.opts.tokensPerSecond;

    await pause(this.opts.ttftMs, signal);
    const start = performance.now();
    const longest = Math.max(...choices.map((c) => c.pieces.length));
    const finished = choices.map(() => false);
    let sent = 0;
    let produced = 0;
    for (;;) {
      // Everything due by now, and at least one token per tick.
      const due = Math.min(longest, Math.max(sent + 1, Math.floor((performance.now() - start) / msPerToken) + 1));
      for (let i = 0; i < n; i++) {
        const c = choices[i]!;
        if (finished[i]) continue;
        const slice = c.pieces.slice(sent, due);
        if (slice.length > 0) {
          produced += slice.length;
          if (!c.call) yield { type: 'delta', index: i, content: slice.join('') };
          else if (sent > 0) yield { type: 'tool_call', index: i, call: 0, arguments: slice.join('') };
          else {
            // The call's name and framing are output too, as the providers count it.
            produced += TOKENS_PER_TOOL + countTokens(c.call.name);
            yield { type: 'tool_call', index: i, call: 0, id: c.call.id, name: c.call.name, arguments: slice.join('') };
          }
          if (signal.aborted) throw abortError();
        }
        if (due >= c.pieces.length) {
          finished[i] = true;
          yield { type: 'finish', index: i, reason: c.finish };
          if (signal.aborted) throw abortError();
        }
      }
      sent = due;
      if (sent >= longest) break;
      await pause(start + sent * msPerToken - performance.now(), signal);
    }
    // The model that answered is this one, whichever catalog model it stands in for.
    yield {
      type: 'usage',
      prompt_tokens: prompt.tokens,
      completion_tokens: produced,
      ...(prompt.cached > 0 ? { cached_tokens: prompt.cached } : {}),
      model: LOCAL_MODEL_FINGERPRINT,
    };
  }

  /**
   * The prompt's tokens, and how many of them the prompt cache holds for its scope and model (none
   * without a scope): as at OpenAI, a prompt cached for one model is not read for another.
   */
  private async promptTokens(params: CompletionParams): Promise<{ tokens: number; cached: number }> {
    const scope = params.cache_scope;
    if (scope === undefined) return { tokens: await this.compute.promptTokens(params.messages, params), cached: 0 };
    const { tokens, digests } = await this.compute.promptPrefixes(params.messages, params);
    return { tokens, cached: this.promptCache.use(`${scope} ${params.model}`, digests) };
  }

  /**
   * Every choice's answer. Prose is cheap and planned here; JSON from a client's schema can cost
   * anything, so it is written on a compute thread within the generation budget.
   */
  private async plan(params: CompletionParams, signal: AbortSignal): Promise<PlannedChoice[]> {
    const schemaField = writesJson(params);
    if (schemaField === undefined) return Array.from({ length: params.n ?? 1 }, (_, i) => planChoice(params, i));
    const { generationBudgetMs: budgetMs, maxAnswerChars } = this.opts;
    let planned;
    try {
      planned = await this.compute.planChoices(params, { budgetMs, maxAnswerChars }, signal);
    } catch (err) {
      if (signal.aborted) throw abortError();
      if (!(err instanceof ComputeLimitError)) throw err;
      throw overBudget(
        schemaField,
        err.limit === 'time'
          ? `it took more than ${budgetMs} ms of its generation budget`
          : 'it needed more memory than its generation budget allows',
      );
    }
    if ('choices' in planned) return planned.choices;
    if ('refused' in planned) {
      const { message, code, param } = planned.refused;
      throw new AppError('invalid_request', message, { code: code ?? undefined, param: param ?? undefined });
    }
    throw overBudget(
      schemaField,
      `the answer would be ${planned.tooLarge.chars} characters long, beyond its limit of ${maxAnswerChars}`,
    );
  }
}

/** The request field whose JSON Schema the answer follows, when it answers in JSON from a schema. */
function writesJson(params: CompletionParams): 'tools' | 'response_format' | undefined {
  if ((params.tools?.length ?? 0) > 0 && params.tool_choice !== 'none') return 'tools';
  if (params.response_format?.type === 'json_schema') return 'response_format';
  return undefined;
}

/**
 * A request whose schema asks for more than the local model writes: the same request would fail
 * again, so it is the client's to change (400), not a failure of the service.
 */
function overBudget(field: 'tools' | 'response_format', why: string): AppError {
  const what = field === 'tools' ? "a tool's parameters" : "the response_format's json_schema";
  return new AppError(
    'invalid_request',
    `The local model exceeded its generation budget writing JSON for ${what}: ${why}. Ask for less (smaller minLength, minItems or fewer required properties).`,
    { code: 'generation_budget_exceeded', param: field },
  );
}
