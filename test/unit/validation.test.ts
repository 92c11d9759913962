import { expect } from 'chai';
import { AppError } from '../../src/errors.js';
import { validate } from '../../src/validation.js';
import { ChatCompletionRequestSchema } from '../../src/chat/request/chat.schema.js';
import { CreateResponseSchema } from '../../src/chat/request/responses.schema.js';

const schema = {
  type: 'object',
  required: ['name', 'items'],
  properties: {
    name: { type: 'string', maxLength: 5 },
    email: { type: 'string', format: 'email' },
    items: {
      type: 'array',
      maxItems: 2,
      items: { type: 'object', required: ['n'], properties: { n: { type: 'integer', minimum: 1, maximum: 3 } } },
    },
  },
};

function issues(value: unknown) {
  try {
    validate(schema, value, 'body');
  } catch (err) {
    expect(err).to.be.instanceOf(AppError);
    return (err as AppError).toBody() as { detail: { loc: (string | number)[]; msg: string; type: string }[] };
  }
  throw new Error('expected a validation error');
}

describe('request validation', () => {
  it('reports a missing field at body.<field> with type "missing"', () => {
    expect(issues({ items: [] }).detail).to.deep.equal([
      { loc: ['body', 'name'], msg: 'Field required', type: 'missing' },
    ]);
  });

  it('locates a nested failure by path, array indexes as integers', () => {
    expect(issues({ name: 'a', items: [{ n: 1 }, { n: 9 }] }).detail).to.deep.equal([
      { loc: ['body', 'items', 1, 'n'], msg: 'Input should be less than or equal to 3', type: 'less_than_equal' },
    ]);
  });

  it('reports every failing field once', () => {
    const d = issues({ name: 'toolong', email: 'nope', items: [{}, {}, {}] }).detail;
    expect(d.map((i) => i.loc)).to.deep.equal([
      ['body', 'name'],
      ['body', 'email'],
      ['body', 'items'],
      ['body', 'items', 0, 'n'],
      ['body', 'items', 1, 'n'],
      ['body', 'items', 2, 'n'],
    ]);
    expect(d[0]).to.deep.include({ type: 'string_too_long', msg: 'String should have at most 5 characters' });
    expect(d[1]).to.deep.include({ type: 'value_error' });
    expect(d[2]).to.deep.include({ type: 'too_long' });
  });

  it('returns the value unchanged when it is valid', () => {
    const v = { name: 'ok', items: [{ n: 2 }] };
    expect(validate(schema, v, 'body')).to.equal(v);
  });

  describe('text every string may carry', () => {
    const chat = (content: string, extra: Record<string, unknown> = {}) => ({
      model: 'm',
      messages: [{ role: 'user', content }],
      ...extra,
    });
    const chatIssues = (value: unknown) => {
      try {
        validate(ChatCompletionRequestSchema, value, 'body');
      } catch (err) {
        return ((err as AppError).toBody() as { detail: { loc: unknown[]; type: string }[] }).detail;
      }
      return [];
    };

    it('refuses NUL and lone surrogates in message content, naming the message', () => {
      expect(chatIssues(chat('a\u0000b'))).to.deep.equal([
        {
          loc: ['body', 'messages', 0, 'content'],
          msg: 'String should not contain control characters (U+0000 at position 1)',
          type: 'value_error',
        },
      ]);
      expect(chatIssues(chat('a\udc00')).map((d) => [d.loc, d.type])).to.deep.equal([
        [['body', 'messages', 0, 'content'], 'string_unicode'],
      ]);
    });

    it('keeps newlines, tabs and astral characters in message content and stop sequences', () => {
      expect(chatIssues(chat('line one\n\tline two\r\n😀', { stop: ['\n\n'] }))).to.deep.equal([]);
    });

    it('refuses control characters in one-line fields: model, role, user, persona', () => {
      const value = { model: 'm\n', messages: [{ role: 'us\ter', content: 'x' }], user: 'u\u0000', persona: 'p\r' };
      expect(chatIssues(value).map((d) => d.loc)).to.deep.equal([
        ['body', 'model'],
        ['body', 'messages', 0, 'role'],
        ['body', 'user'],
        ['body', 'persona'],
      ]);
    });
  });

  describe('reasoning effort', () => {
    const refusalOf = (schema: Record<string, unknown>, value: unknown) => {
      try {
        validate(schema, value, 'body');
      } catch (err) {
        const e = err as AppError;
        return {
          status: e.status,
          body: e.toBody() as { detail: { loc: unknown[]; type: string }[]; error: { param: string } },
        };
      }
      throw new Error('expected a validation error');
    };

    it("takes OpenAI's efforts, none to max, and null, on chat and on Responses", () => {
      for (const effort of ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max', null]) {
        validate(
          ChatCompletionRequestSchema,
          { model: 'm', messages: [{ role: 'user', content: 'Hi' }], reasoning_effort: effort },
          'body',
        );
        validate(CreateResponseSchema, { model: 'm', input: 'Hi', reasoning: { effort } }, 'body');
      }
    });

    it('refuses another value on chat with a 422 at reasoning_effort', () => {
      const r = refusalOf(ChatCompletionRequestSchema, {
        model: 'm',
        messages: [{ role: 'user', content: 'Hi' }],
        reasoning_effort: 'extreme',
      });
      expect(r.status).to.equal(422);
      expect(r.body.detail.map((d) => [d.loc, d.type])).to.deep.equal([[['body', 'reasoning_effort'], 'enum']]);
      expect(r.body.error.param).to.equal('reasoning_effort');
    });

    it('refuses another value on Responses at reasoning.effort, as every schema refusal there', () => {
      const r = refusalOf(CreateResponseSchema, { model: 'm', input: 'Hi', reasoning: { effort: 'extreme' } });
      expect(r.status).to.equal(422);
      expect(r.body.detail.map((d) => [d.loc, d.type])).to.deep.equal([[['body', 'reasoning', 'effort'], 'enum']]);
      expect(r.body.error.param).to.equal('reasoning.effort');
    });
  });

  describe('cache_control', () => {
    const mark = (cache_control: unknown) => ({
      model: 'm',
      messages: [
        { role: 'system', content: 'Rules.', cache_control },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'A long document.', cache_control },
            { type: 'image_url', image_url: { url: 'https://example.com/a.png' }, cache_control },
          ],
        },
      ],
      tools: [{ type: 'function', function: { name: 'search' }, cache_control }],
    });
    const refusedAt = (value: unknown) => {
      try {
        validate(ChatCompletionRequestSchema, value, 'body');
      } catch (err) {
        const e = err as AppError;
        expect(e.status).to.equal(422);
        return (e.toBody() as { detail: { loc: unknown[]; type: string }[] }).detail.map((d) => [d.loc, d.type]);
      }
      throw new Error('expected a validation error');
    };

    it('takes an ephemeral mark, with a 5m or 1h ttl or none, on a message, a text or image part and a tool', () => {
      for (const cacheControl of [
        { type: 'ephemeral' },
        { type: 'ephemeral', ttl: '5m' },
        { type: 'ephemeral', ttl: '1h' },
        { type: 'ephemeral', ttl: null },
        null,
      ])
        expect(() => validate(ChatCompletionRequestSchema, mark(cacheControl), 'body')).to.not.throw();
    });

    it('refuses another type with a 422 at each mark’s type', () => {
      expect(refusedAt(mark({ type: 'persistent' }))).to.deep.equal([
        [['body', 'messages', 0, 'cache_control', 'type'], 'literal_error'],
        [['body', 'messages', 1, 'content', 0, 'cache_control', 'type'], 'literal_error'],
        [['body', 'messages', 1, 'content', 1, 'cache_control', 'type'], 'literal_error'],
        [['body', 'tools', 0, 'cache_control', 'type'], 'literal_error'],
      ]);
    });

    it('refuses a ttl other than 5m and 1h with a 422 at the ttl', () => {
      const value = {
        model: 'm',
        messages: [
          { role: 'user', content: [{ type: 'text', text: 'A', cache_control: { type: 'ephemeral', ttl: '24h' } }] },
        ],
      };
      expect(refusedAt(value)).to.deep.equal([[['body', 'messages', 0, 'content', 0, 'cache_control', 'ttl'], 'enum']]);
    });

    it('refuses a mark that is not an object, or has no type, at the mark', () => {
      const value = {
        model: 'm',
        messages: [{ role: 'user', content: 'A', cache_control: 'ephemeral' }],
        tools: [{ type: 'function', function: { name: 'search' }, cache_control: { ttl: '1h' } }],
      };
      expect(refusedAt(value)).to.deep.equal([
        [['body', 'messages', 0, 'cache_control'], 'dict_type'],
        [['body', 'tools', 0, 'cache_control', 'type'], 'missing'],
      ]);
    });
  });
});
