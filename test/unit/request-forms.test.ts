import { expect } from 'chai';
import { AppError } from '../../src/errors.js';
import { completionParamsOf } from '../../src/chat/request/request-forms.js';
import type { ChatCompletionRequest } from '../../src/chat/request/chat.schema.js';

const TEXT_ONLY = { id: 'text-model', upstream_model: 'text-model' };
const WITH_IMAGES = { ...TEXT_ONLY, input_modalities: ['text' as const, 'image' as const] };
const PNG = 'data:image/png;base64,iVBORw0KGgo=';

const withImage = (url: string, role = 'user'): ChatCompletionRequest => ({
  model: 'm',
  messages: [
    {
      role,
      content: [
        { type: 'text', text: 'What is this?' },
        { type: 'image_url', image_url: { url } },
      ],
    },
  ],
});

function detailOf(fn: () => unknown) {
  try {
    fn();
  } catch (err) {
    expect(err).to.be.instanceOf(AppError);
    return (err as AppError).detail;
  }
  throw new Error('expected a 422');
}

describe('request forms after validation (what JSON Schema cannot say)', () => {
  it('refuses an image part at the part for a model the catalog does not mark as taking images', () => {
    expect(detailOf(() => completionParamsOf(withImage(PNG), TEXT_ONLY))).to.deep.equal([
      {
        loc: ['body', 'messages', 0, 'content', 1],
        msg: 'The model `text-model` does not take images; send text parts only',
        type: 'value_error',
      },
    ]);
  });

  it('takes a data URL image for a model that takes images, and refuses one in a message that is not the user’s', () => {
    expect(completionParamsOf(withImage(PNG), WITH_IMAGES).messages[0]!.content).to.have.length(2);
    expect(detailOf(() => completionParamsOf(withImage(PNG, 'system'), WITH_IMAGES))![0]!.loc).to.deep.equal([
      'body',
      'messages',
      0,
      'content',
      1,
      'type',
    ]);
  });

  it('refuses an image URL the service would have to fetch (http), or a data URL that is not an image type it takes', () => {
    for (const url of ['http://example.com/a.png', 'data:image/tiff;base64,AAAA', 'data:text/plain;base64,AAAA'])
      expect(detailOf(() => completionParamsOf(withImage(url), WITH_IMAGES))![0]!.loc, url).to.deep.equal([
        'body',
        'messages',
        0,
        'content',
        1,
        'image_url',
        'url',
      ]);
  });

  it('counts an image data URL against the message’s 50,000 characters', () => {
    const big = `data:image/png;base64,${'A'.repeat(50_000)}`;
    expect(detailOf(() => completionParamsOf(withImage(big), WITH_IMAGES))![0]).to.include({
      type: 'string_too_long',
    });
  });

  it('reads stop as a list, max_completion_tokens as max_tokens, and drops tool_choice without tools', () => {
    const p = completionParamsOf(
      {
        model: 'm',
        messages: [{ role: 'user', content: 'hi' }],
        stop: '\n',
        max_completion_tokens: 9,
        tool_choice: 'auto',
      },
      TEXT_ONLY,
    );
    expect(p).to.deep.include({ stop: ['\n'], max_tokens: 9 });
    expect(p).to.not.have.property('tool_choice');
  });

  it('passes reasoning_effort on for a model the catalog marks as reasoning, and leaves it out for another', () => {
    const req: ChatCompletionRequest = {
      model: 'm',
      messages: [{ role: 'user', content: 'Hi' }],
      reasoning_effort: 'low',
    };
    expect(completionParamsOf(req, { ...TEXT_ONLY, reasoning: true }).reasoning_effort).to.equal('low');
    expect(completionParamsOf(req, TEXT_ONLY)).to.not.have.property('reasoning_effort');
    expect(
      completionParamsOf({ ...req, reasoning_effort: null }, { ...TEXT_ONLY, reasoning: true }),
    ).to.not.have.property('reasoning_effort');
  });

  it('carries cache_control marks of parts, messages and tools to the adapters, a null mark or ttl as unset', () => {
    const p = completionParamsOf(
      {
        model: 'm',
        messages: [
          { role: 'system', content: 'Rules.', cache_control: { type: 'ephemeral', ttl: '1h' } },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'A', cache_control: { type: 'ephemeral', ttl: null } },
              { type: 'text', text: 'B', cache_control: null },
            ],
            cache_control: null,
          },
        ],
        tools: [{ type: 'function', function: { name: 'search' }, cache_control: { type: 'ephemeral', ttl: '5m' } }],
      },
      TEXT_ONLY,
    );
    expect(p.messages).to.deep.equal([
      { role: 'system', content: 'Rules.', cache_control: { type: 'ephemeral', ttl: '1h' } },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'A', cache_control: { type: 'ephemeral' } },
          { type: 'text', text: 'B' },
        ],
      },
    ]);
    expect(p.tools).to.deep.equal([
      { type: 'function', function: { name: 'search' }, cache_control: { type: 'ephemeral', ttl: '5m' } },
    ]);
  });
});
