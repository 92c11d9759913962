// A json_schema answer with strict: true is checked against its schema before the client has any
// of it: each choice's text is held until the choice finishes, parsed and validated, then sent
// whole; one that does not match fails the request (502) rather than reach the client.
import { AppError } from '../errors.js';
import type { ComputePool } from './compute-pool.js';
import type { AnswerVerdict } from './compute-tasks.js';
import { ProviderError, type UpstreamEvent, type CompletionParams, type Provider } from './types.js';

/** The provider with its strict json_schema answers checked (any other request passes untouched). */
export function withCheckedOutput(inner: Provider, compute: ComputePool): Provider {
  const complete = inner.complete?.bind(inner);
  const checked =
    (source: (p: CompletionParams, s: AbortSignal) => AsyncIterable<UpstreamEvent>) =>
    (p: CompletionParams, signal: AbortSignal) => {
      const format = p.response_format;
      if (format?.type !== 'json_schema' || format.json_schema.strict !== true || !format.json_schema.schema)
        return source(p, signal);
      const schema = format.json_schema.schema;
      return checkAnswers(source(p, signal), format.json_schema.name, (text) =>
        compute.answerProblem(schema, text, signal),
      );
    };
  return {
    name: inner.name,
    fingerprint: inner.fingerprint,
    wraps: inner,
    ...(inner.maxChoices === undefined ? {} : { maxChoices: inner.maxChoices }),
    check: (p) => inner.check(p),
    stream: checked((p, s) => inner.stream(p, s)),
    ...(complete ? { complete: checked(complete) } : {}),
  };
}

async function* checkAnswers(
  events: AsyncIterable<UpstreamEvent>,
  name: string,
  problemOf: (text: string) => Promise<AnswerVerdict>,
): AsyncGenerator<UpstreamEvent> {
  const held = new Map<number, string>();
  for await (const ev of events) {
    if (ev.type === 'delta') {
      held.set(ev.index, (held.get(ev.index) ?? '') + ev.content);
      continue;
    }
    if (ev.type === 'finish') {
      const text = held.get(ev.index) ?? '';
      // A choice cut at max_tokens, or one that called tools, is not an answer to check.
      if (ev.reason === 'stop' && text !== '') {
        const problem = await problemOf(text);
        if (typeof problem === 'object')
          throw new AppError('invalid_request', `The json_schema '${name}' could not be compiled to check the answer`, {
            code: 'invalid_json_schema',
            param: 'response_format.json_schema.schema',
          });
        if (problem)
          throw new ProviderError(
            `The model's answer does not match the json_schema '${name}': ${problem}`,
            502,
            false,
          );
      }
      if (text !== '') yield { type: 'delta', index: ev.index, content: text };
    }
    yield ev;
  }
}
