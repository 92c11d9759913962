import { readFileSync } from 'node:fs';
import { expect } from 'chai';
import { openAiIssues, responseEventIssues } from '../support/openai-schemas.js';

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

const response = () => ({
  id: 'resp_1',
  object: 'response',
  created_at: 1_741_487_325,
  status: 'completed',
  model: 'gpt-4o',
  output: [
    {
      type: 'message',
      id: 'msg_1',
      status: 'completed',
      role: 'assistant',
      content: [{ type: 'output_text', text: 'Hi', annotations: [], logprobs: [] }],
    },
  ],
  usage: {
    input_tokens: 3,
    input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
    output_tokens: 1,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 4,
  },
  error: null,
  incomplete_details: null,
  instructions: null,
  metadata: {},
  parallel_tool_calls: true,
  temperature: 1,
  top_p: 1,
  tool_choice: 'auto',
  tools: [],
});

describe("OpenAI's published Responses API schemas, as the tests read them", () => {
  it('accepts a whole response with a message and its usage', () => {
    expect(openAiIssues('Response', response())).to.deep.equal([]);
  });

  it('refuses a response whose usage has no output_tokens_details', () => {
    const body = response();
    delete (body.usage as { output_tokens_details?: unknown }).output_tokens_details;
    expect(openAiIssues('Response', body)).to.deep.equal([
      `/usage must have required property 'output_tokens_details' {"missingProperty":"output_tokens_details"}`,
    ]);
  });

  it("accepts OpenAI's own examples of an item added and a function call's arguments done", () => {
    for (const name of ['ResponseOutputItemAddedEvent', 'ResponseFunctionCallArgumentsDoneEvent'])
      expect(responseEventIssues(JSON.parse(exampleOf(name))), name).to.deep.equal([]);
  });

  it('checks a stream event against the schema of its own type, naming only what that type misses', () => {
    const delta = {
      type: 'response.output_text.delta',
      item_id: 'msg_1',
      output_index: 0,
      content_index: 0,
      delta: 'Hi',
    };
    expect(responseEventIssues({ ...delta, sequence_number: 4, logprobs: [] })).to.deep.equal([]);
    expect(responseEventIssues({ ...delta, logprobs: [] })).to.deep.equal([
      `/ must have required property 'sequence_number' {"missingProperty":"sequence_number"}`,
    ]);
  });

  it('refuses a stream event of a type OpenAI does not send', () => {
    expect(responseEventIssues({ type: 'response.text.delta', sequence_number: 0 })).to.deep.equal([
      '/type "response.text.delta" is not an event type of ResponseStreamEvent',
    ]);
  });

  it('accepts a request with a string input and refuses one whose input is a number', () => {
    expect(openAiIssues('CreateResponse', { model: 'gpt-4o', input: 'Hi' })).to.deep.equal([]);
    expect(openAiIssues('CreateResponse', { model: 'gpt-4o', input: 5 })).to.not.deep.equal([]);
  });
});
