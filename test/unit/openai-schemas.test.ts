import { readFileSync } from 'node:fs';
import { expect } from 'chai';
import { openAiIssues } from '../support/openai-schemas.js';

// The examples OpenAI publishes beside its schemas (x-oaiMeta.example) are real wire output, so
// the checks the wire-format tests rely on must accept them and refuse what OpenAI would not send.
const schemas = JSON.parse(readFileSync('test/fixtures/openai-openapi/schemas.json', 'utf8')).components.schemas;
const exampleOf = (name: string): string => schemas[name]['x-oaiMeta'].example;

const answer = () => ({
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 1_741_570_283,
  model: 'gpt-4o',
  choices: [
    { index: 0, message: { role: 'assistant', content: 'Hi', refusal: null }, logprobs: null, finish_reason: 'stop' },
  ],
  usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
});

describe("OpenAI's published response schemas, as the tests read them", () => {
  it("accepts OpenAI's own example chunks, whose finish_reason and logprobs are null", () => {
    const chunks = exampleOf('CreateChatCompletionStreamResponse')
      .split('\n\n')
      .map((s) => s.trim())
      .filter((s) => s.startsWith('{'));
    expect(chunks).to.have.length(3);
    for (const c of chunks) expect(openAiIssues('CreateChatCompletionStreamResponse', JSON.parse(c))).to.deep.equal([]);
  });

  it('accepts a chunk with usage null, as every chunk but the last carries when usage is asked for', () => {
    const chunk = {
      id: 'chatcmpl-1',
      object: 'chat.completion.chunk',
      created: 1_694_268_190,
      model: 'gpt-4o',
      choices: [],
      usage: null,
    };
    expect(openAiIssues('CreateChatCompletionStreamResponse', chunk)).to.deep.equal([]);
  });

  it("accepts OpenAI's own examples of a whole answer and of a model", () => {
    expect(
      openAiIssues('CreateChatCompletionResponse', JSON.parse(exampleOf('CreateChatCompletionResponse'))),
    ).to.deep.equal([]);
    expect(openAiIssues('Model', JSON.parse(exampleOf('Model')))).to.deep.equal([]);
  });

  it('refuses a whole answer whose message has no refusal field', () => {
    const body = answer();
    delete (body.choices[0]!.message as { refusal?: null }).refusal;
    expect(openAiIssues('CreateChatCompletionResponse', body)).to.deep.equal([
      `/choices/0/message must have required property 'refusal' {"missingProperty":"refusal"}`,
    ]);
  });

  it('refuses a created time in milliseconds', () => {
    expect(openAiIssues('CreateChatCompletionResponse', { ...answer(), created: 1_741_570_283_000 })).to.have.length(1);
  });

  it('refuses an error body without param and code', () => {
    expect(openAiIssues('ErrorResponse', { error: { message: 'no', type: 'invalid_request_error' } })).to.have.length(
      2,
    );
  });
});
