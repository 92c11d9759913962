import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { schemaMismatch } from '../../src/providers/json-schema.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, post } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';

// Every JSON Schema of issue 29, sent as a strict response_format and as a tool's parameters
// (the tool named by tool_choice) to real web and worker processes on the built-in model: each
// gets an answer that matches it or a 4xx at its field saying why, never a 500 and never a hang,
// and the web's access log records the status the client saw.

type Schema = Record<string, unknown>;
const ONE_VALUE = (v: unknown): Schema => ({
  type: 'object',
  properties: { v },
  required: ['v'],
  additionalProperties: false,
});
const wide = (n: number): Schema => ({
  type: 'object',
  properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: 'string' }])),
});

interface Case {
  name: string;
  schema: Schema;
  /** Undefined: an answer matching the schema. Otherwise the refusal's place in the schema and words. */
  refused?: { at: (string | number)[]; says: RegExp };
  toolChoice?: 'required';
}

const CASES: Case[] = [
  {
    name: 'a string of minLength 100,000,000',
    schema: ONE_VALUE({ type: 'string', minLength: 100_000_000 }),
    refused: { at: ['properties', 'v', 'minLength'], says: /longest string the service can produce is 16,384/ },
  },
  {
    name: 'a string of minLength 1,000,000',
    schema: ONE_VALUE({ type: 'string', minLength: 1_000_000 }),
    refused: { at: ['properties', 'v', 'minLength'], says: /longest string the service can produce/ },
  },
  {
    name: 'an integer of minimum 10 and maximum 1',
    schema: ONE_VALUE({ type: 'integer', minimum: 10, maximum: 1 }),
    refused: { at: ['properties', 'v'], says: /No integer is at least 10 and at most 1/ },
  },
  {
    name: 'not {}',
    schema: ONE_VALUE({ not: {} }),
    refused: { at: ['properties', 'v', 'not'], says: /accepts no value/ },
  },
  { name: 'a number of minimum 1e308', schema: ONE_VALUE({ type: 'number', minimum: 1e308 }) },
  {
    name: 'pattern ^(a|aa)+$ with minLength 40',
    schema: ONE_VALUE({ type: 'string', pattern: '^(a|aa)+$', minLength: 40 }),
  },
  {
    name: 'a required recursive $defs, with tool_choice "required"',
    schema: {
      type: 'object',
      properties: { node: { $ref: '#/$defs/node' } },
      required: ['node'],
      $defs: { node: { type: 'object', properties: { child: { $ref: '#/$defs/node' } }, required: ['child'] } },
    },
    refused: { at: ['properties', 'node', '$ref'], says: /'#\/\$defs\/node' has no finite value/ },
    toolChoice: 'required',
  },
  { name: '2,000 string properties', schema: wide(2000) },
  { name: '5,000 string properties', schema: wide(5000) },
  {
    name: 'a $ref loop',
    schema: {
      type: 'object',
      properties: { v: { $ref: '#/$defs/a' } },
      required: ['v'],
      $defs: { a: { $ref: '#/$defs/b' }, b: { $ref: '#/$defs/a' } },
    },
    refused: { at: ['$defs', 'b', '$ref'], says: /refers back to itself/ },
  },
  {
    name: 'pattern ^(?!(a|a)*b)a{40}$',
    schema: ONE_VALUE({ type: 'string', pattern: '^(?!(a|a)*b)a{40}$' }),
    refused: { at: ['properties', 'v', 'pattern'], says: /without backreferences and lookaround/ },
  },
];

const FORMS = {
  response_format: {
    field: ['body', 'response_format', 'json_schema', 'schema'],
    body: (c: Case) => ({
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: c.schema, strict: true } },
    }),
    answer: (message: { content: string | null }) => message.content!,
  },
  tool: {
    field: ['body', 'tools', 1, 'function', 'parameters'],
    body: (c: Case) => ({
      tools: [
        { type: 'function', function: { name: 'other', parameters: { type: 'object' } } },
        { type: 'function', function: { name: 'fill', parameters: c.schema } },
      ],
      tool_choice: c.toolChoice ?? { type: 'function', function: { name: 'fill' } },
    }),
    answer: (message: { tool_calls?: { function: { name: string; arguments: string } }[] }) => {
      const call = message.tool_calls?.find((t) => t.function.name === 'fill');
      expect(call, 'a call of the tool').to.not.equal(undefined);
      return call!.function.arguments;
    },
  },
} as const;

/** A client that gives up: no case may hang, however the service treats it. */
const CLIENT_TIMEOUT_MS = 30_000;

describe('client JSON Schemas at their limits, through web and worker processes (built-in local model)', function () {
  this.timeout(120_000);
  let app: AppContext;
  let web: RoleProcess;
  let worker: RoleProcess;
  let user: TestAccount;
  let sent = 0;

  before(async () => {
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '5000',
    };
    app = createContext(testConfig(env), { role: 'test' });
    // debug: the access log's lines for 2xx answers too.
    [web, worker] = await Promise.all([startRole('web', { ...env, LOG_LEVEL: 'debug' }), startRole('worker', env)]);
    user = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => {
    await Promise.all([web?.stop(), worker?.stop()]);
    await app?.close();
  });

  /** The status the web's access log recorded for the request with this id. */
  const loggedStatus = (requestId: string) =>
    eventually(async () => {
      for (const line of web.output().split('\n')) {
        if (!line.includes(requestId)) continue;
        const record = JSON.parse(line) as { msg: string; status?: number };
        if (record.msg === 'request') return record.status;
      }
      return undefined;
    }, `the access log line of ${requestId}`);

  for (const c of CASES) {
    for (const [form, how] of Object.entries(FORMS)) {
      const outcome = c.refused ? `is refused with a 422 at ${c.refused.at.join('.')}` : 'gets an answer matching it';
      it(`${c.name}, as ${form === 'tool' ? "a tool's parameters" : 'a strict response_format'}, ${outcome}`, async () => {
        const requestId = `schema-case-${process.pid}-${++sent}`;
        const r = await post(
          `${web.url}/v1/chat/completions`,
          { model: 'gpt-4.1-mini', messages: [{ role: 'user', content: 'Fill in the form' }], ...how.body(c) },
          {
            bearer: user.apiKey,
            headers: { 'x-request-id': requestId },
            signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS),
          },
        );
        if (c.refused) {
          expect(r.status, r.text).to.equal(422);
          expect(r.body.detail[0].loc).to.deep.equal([...how.field, ...c.refused.at]);
          expect(r.body.detail[0].msg).to.match(c.refused.says);
          expect(r.text).to.not.match(/call stack|RangeError|Ajv|faker/i);
        } else {
          expect(r.status, r.text).to.equal(200);
          const answer = JSON.parse((how.answer as (m: unknown) => string)(r.body.choices[0].message)) as unknown;
          expect(schemaMismatch(c.schema, answer)).to.equal(undefined);
        }
        expect(await loggedStatus(requestId)).to.equal(r.status);
      });
    }
  }
});
