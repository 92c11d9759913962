import { expect } from 'chai';
import { AppError } from '../../src/errors.js';
import { translateResponsesRequest } from '../../src/chat/request/responses-request.js';
import type { CreateResponseRequest } from '../../src/chat/request/responses.schema.js';

const refusal = (body: unknown): AppError => {
  try {
    translateResponsesRequest(body as CreateResponseRequest);
  } catch (err) {
    if (err instanceof AppError) return err;
    throw err;
  }
  throw new Error('expected a refusal');
};

describe('a Responses API request as the chat request its job carries', () => {
  it('turns instructions, message items, function calls and their outputs into messages, leaving reasoning out', () => {
    const { chat } = translateResponsesRequest({
      model: 'm',
      instructions: 'Be brief.',
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'Weather?' }] },
        { type: 'reasoning', id: 'rs_1' },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Looking.' }] },
        { type: 'function_call', call_id: 'c1', name: 'get_weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call', call_id: 'c2', name: 'get_weather', arguments: '{"city":"Rome"}' },
        { type: 'function_call_output', call_id: 'c1', output: '21' },
        { type: 'function_call_output', call_id: 'c2', output: [{ type: 'input_text', text: '25' }] },
      ],
    });
    expect(chat.messages).to.deep.equal([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: [{ type: 'text', text: 'Weather?' }] },
      {
        role: 'assistant',
        content: [{ type: 'text', text: 'Looking.' }],
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
          { id: 'c2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'c1', content: '21' },
      { role: 'tool', tool_call_id: 'c2', content: [{ type: 'text', text: '25' }] },
    ]);
  });

  it('maps flat function tools, tool_choice, text.format and max_output_tokens to their chat forms', () => {
    const { chat } = translateResponsesRequest({
      model: 'm',
      input: 'Hi',
      tools: [{ type: 'function', name: 'f', parameters: { type: 'object' }, strict: true }],
      tool_choice: { type: 'function', name: 'f' },
      text: { format: { type: 'json_schema', name: 's', schema: { type: 'object' }, strict: true } },
      max_output_tokens: 50,
    });
    expect(chat.tools).to.deep.equal([
      { type: 'function', function: { name: 'f', parameters: { type: 'object' }, strict: true } },
    ]);
    expect(chat.tool_choice).to.deep.equal({ type: 'function', function: { name: 'f' } });
    expect(chat.response_format).to.deep.equal({
      type: 'json_schema',
      json_schema: { name: 's', schema: { type: 'object' }, strict: true },
    });
    expect(chat.max_completion_tokens).to.equal(50);
  });

  it('maps reasoning.effort to reasoning_effort and echoes it, with the summary asked for', () => {
    const { chat, wire, locOf } = translateResponsesRequest({
      model: 'm',
      input: 'Hi',
      reasoning: { effort: 'high', summary: 'auto' },
    });
    expect(chat.reasoning_effort).to.equal('high');
    expect(wire.echo.reasoning).to.deep.equal({ effort: 'high', summary: 'auto' });
    expect(locOf(['body', 'reasoning_effort'])).to.deep.equal(['body', 'reasoning', 'effort']);
  });

  it('sends no reasoning_effort when reasoning or its effort is left out or null', () => {
    for (const reasoning of [undefined, null, {}, { effort: null }])
      expect(
        translateResponsesRequest({ model: 'm', input: 'Hi', reasoning }).chat,
        JSON.stringify(reasoning),
      ).to.not.have.property('reasoning_effort');
  });

  it("names a chat rule's refusal at the input item it came from, past instructions and reasoning items", () => {
    const { locOf } = translateResponsesRequest({
      model: 'm',
      instructions: 'x',
      input: [
        { type: 'reasoning' },
        { role: 'user', content: 'Hi' },
        { type: 'function_call_output', call_id: 'nobody', output: '1' },
      ],
    });
    expect(locOf(['body', 'messages', 2, 'tool_call_id'])).to.deep.equal(['body', 'input', 2, 'call_id']);
    expect(locOf(['body', 'messages', 2, 'content'])).to.deep.equal(['body', 'input', 2, 'output']);
    expect(locOf(['body', 'messages', 0, 'content'])).to.deep.equal(['body', 'instructions']);
    expect(locOf(['body', 'tools', 0, 'function', 'parameters', 'type'])).to.deep.equal([
      'body',
      'tools',
      0,
      'parameters',
      'type',
    ]);
    expect(locOf(['body', 'max_tokens'])).to.deep.equal(['body', 'max_output_tokens']);
  });

  it('refuses an unknown field with a 400 naming it', () => {
    const err = refusal({ model: 'm', input: 'Hi', frobnicate: 1 });
    expect(err.status).to.equal(400);
    expect(err.toBody()).to.deep.equal({
      error: {
        message: "Unknown parameter: 'frobnicate'.",
        type: 'invalid_request_error',
        code: 'unknown_parameter',
        param: 'frobnicate',
      },
    });
  });

  it('accepts the fields that change nothing with the values that mean so, and refuses other values', () => {
    expect(() =>
      translateResponsesRequest({
        model: 'm',
        input: 'Hi',
        include: [],
        truncation: 'disabled',
        service_tier: 'auto',
        prompt_cache_key: 'k',
        top_logprobs: 0,
      } as CreateResponseRequest),
    ).to.not.throw();
    const err = refusal({ model: 'm', input: 'Hi', truncation: 'auto' });
    expect([err.status, err.param]).to.deep.equal([400, 'truncation']);
  });

  it('refuses a content part, item or tool type it does not take with a 400 at that type', () => {
    const part = refusal({ model: 'm', input: [{ role: 'user', content: [{ type: 'input_file', file_id: 'f' }] }] });
    expect([part.status, part.param]).to.deep.equal([400, 'input[0].content[0].type']);
    const item = refusal({ model: 'm', input: [{ type: 'web_search_call' }] });
    expect([item.status, item.param]).to.deep.equal([400, 'input[0].type']);
    const tool = refusal({ model: 'm', input: 'Hi', tools: [{ type: 'file_search' }] });
    expect([tool.status, tool.param]).to.deep.equal([400, 'tools[0].type']);
  });

  it('refuses background with store: false with a 400 naming store', () => {
    const err = refusal({ model: 'm', input: 'Hi', background: true, store: false });
    expect([err.status, err.param]).to.deep.equal([400, 'store']);
  });

  it('runs a background request as a resumable stream, echoing background: true', () => {
    const { chat, wire } = translateResponsesRequest({ model: 'm', input: 'Hi', background: true });
    expect([chat.stream, chat.stream_options]).to.deep.equal([true, { resumable: true }]);
    expect([wire.background, wire.store, wire.echo.background]).to.deep.equal([true, true, true]);
  });

  it("puts a stored response's items between the instructions and the new input, echoing previous_response_id", () => {
    const prior = [
      { type: 'message', role: 'user' as const, content: [{ type: 'input_text', text: 'Weather?' }] },
      { type: 'message', role: 'assistant' as const, content: [{ type: 'output_text', text: 'Sunny.' }] },
    ];
    const { chat, wire } = translateResponsesRequest(
      { model: 'm', instructions: 'Be brief.', input: 'Tomorrow?', previous_response_id: 'resp_1' },
      prior,
    );
    expect(chat.messages.map((m) => [m.role, m.content])).to.deep.equal([
      ['system', 'Be brief.'],
      ['user', [{ type: 'text', text: 'Weather?' }]],
      ['assistant', [{ type: 'text', text: 'Sunny.' }]],
      ['user', 'Tomorrow?'],
    ]);
    expect(wire.echo.previous_response_id).to.equal('resp_1');
  });

  it('carries the input as stored items with ids only when the response is stored', () => {
    const stored = translateResponsesRequest({ model: 'm', input: 'Hi' }).wire;
    expect(stored.store).to.equal(true);
    expect(stored.input).to.have.length(1);
    expect(stored.input![0]).to.deep.include({ type: 'message', role: 'user', status: 'completed' });
    expect(stored.input![0]!.id).to.match(/^msg_/);
    expect(stored.input![0]!.content).to.deep.equal([{ type: 'input_text', text: 'Hi' }]);
    const unstored = translateResponsesRequest({ model: 'm', input: 'Hi', store: false }).wire;
    expect([unstored.store, unstored.input]).to.deep.equal([false, undefined]);
  });
});
