import { createOpenAI } from '@ai-sdk/openai';
import { type AIMessage, HumanMessage, ToolMessage, type BaseMessage } from '@langchain/core/messages';
import { ChatOpenAI } from '@langchain/openai';
import { Agent, OpenAIProvider, Runner, tool as agentTool } from '@openai/agents';
import { generateText, jsonSchema, stepCountIs, tool } from 'ai';
import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';

// The agent frameworks people build on OpenAI's API, pointed at a running service (web and worker
// processes, the built-in local model) as an OpenAI-compatible provider: each runs its agent loop,
// a tool call, the tool's result sent back, to a final answer.

const CITY_SCHEMA = {
  type: 'object' as const,
  properties: { city: { type: 'string' as const, description: 'The city' } },
  required: ['city'],
  additionalProperties: false,
};

describe('agent frameworks against a running service (web and worker processes, local model)', function () {
  this.timeout(60_000);
  const env = {
    REDIS_PREFIX: isolatedPrefix(),
    MODEL_BACKEND: 'local',
    LOCAL_MODEL_TTFT_MS: '0',
    LOCAL_MODEL_TOKENS_PER_SECOND: '5000',
  };
  let app: AppContext;
  let web: RoleProcess;
  let worker: RoleProcess;
  let user: TestAccount;

  before(async () => {
    app = createContext(testConfig(env), { role: 'test' });
    [web, worker] = await Promise.all([startRole('web', env), startRole('worker', env)]);
    user = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => {
    await Promise.all([web?.stop(), worker?.stop()]);
    await app?.close();
  });

  it("runs the Vercel AI SDK's generateText with tools over several steps to a final answer", async () => {
    const provider = createOpenAI({ apiKey: user.apiKey, baseURL: `${web.url}/v1` });
    const cities: string[] = [];
    const result = await generateText({
      model: provider.chat('gpt-4.1-mini'),
      prompt: 'What is the weather in Paris?',
      tools: {
        get_weather: tool({
          description: 'The current weather in a city',
          inputSchema: jsonSchema<{ city: string }>(CITY_SCHEMA),
          execute: async ({ city }) => {
            cities.push(city);
            return { city, temperature: 21 };
          },
        }),
      },
      stopWhen: stepCountIs(5),
      maxRetries: 0,
    });
    expect(result.steps).to.have.length(2);
    expect(result.steps[0]!.finishReason).to.equal('tool-calls');
    expect(cities).to.have.length(1);
    expect(result.finishReason).to.equal('stop');
    expect(result.text).to.match(/^Going by what get_weather returned: /);
    expect(result.totalUsage.inputTokens).to.be.greaterThan(0);
  });

  it("runs the Vercel AI SDK's default OpenAI provider (the Responses API) with a tool to a final answer", async () => {
    const provider = createOpenAI({ apiKey: user.apiKey, baseURL: `${web.url}/v1` });
    const cities: string[] = [];
    const result = await generateText({
      model: provider('gpt-4.1-mini'),
      prompt: 'What is the weather in Paris?',
      tools: {
        get_weather: tool({
          description: 'The current weather in a city',
          inputSchema: jsonSchema<{ city: string }>(CITY_SCHEMA),
          execute: async ({ city }) => {
            cities.push(city);
            return { city, temperature: 21 };
          },
        }),
      },
      stopWhen: stepCountIs(5),
      maxRetries: 0,
    });
    expect(result.steps).to.have.length(2);
    expect(result.response.id).to.match(/^resp_/);
    expect(cities).to.have.length(1);
    expect(result.text).to.match(/^Going by what get_weather returned: /);
    expect(result.totalUsage.inputTokens).to.be.greaterThan(0);
  });

  it('runs an OpenAI Agents SDK agent on its default transport (the Responses API) with a tool to its final answer', async () => {
    // An account of its own, so the ledger rows counted below are this agent's.
    const own = await createTestAccount(app, { tier: 'paid' });
    const cities: string[] = [];
    const getWeather = agentTool({
      name: 'get_weather',
      description: 'The current weather in a city',
      parameters: { ...CITY_SCHEMA, required: ['city'], additionalProperties: false as const },
      strict: true,
      execute: async (input) => {
        const { city } = input as { city: string };
        cities.push(city);
        return JSON.stringify({ city, temperature: 21 });
      },
    });
    const agent = new Agent({
      name: 'Weather',
      instructions: 'Answer questions about the weather.',
      model: 'gpt-4.1-mini',
      tools: [getWeather],
    });
    // Default settings but the service's address and key (and no traces sent to OpenAI).
    const runner = new Runner({
      modelProvider: new OpenAIProvider({ apiKey: own.apiKey, baseURL: `${web.url}/v1` }),
      tracingDisabled: true,
    });
    const result = await runner.run(agent, 'What is the weather in Paris?');
    expect(cities).to.have.length(1);
    expect(result.finalOutput).to.match(/^Going by what get_weather returned: /);
    // Both turns went through POST /v1/responses: the ledger has them under Response ids.
    const rows = await eventually(async () => {
      const found = await app.db
        .selectFrom('usage_events')
        .select('request_id')
        .where('account_id', '=', own.account.id)
        .where('request_id', 'like', 'resp_%')
        .execute();
      return found.length === 2 ? found : undefined;
    }, 'the usage rows of both turns');
    expect(rows).to.have.length(2);
  });

  it("runs LangChain's bindTools with a ToolMessage to a final answer", async () => {
    const model = new ChatOpenAI({
      model: 'gpt-4.1-mini',
      apiKey: user.apiKey,
      configuration: { baseURL: `${web.url}/v1` },
      maxRetries: 0,
    }).bindTools([
      {
        type: 'function',
        function: { name: 'get_weather', description: 'The current weather in a city', parameters: CITY_SCHEMA },
      },
    ]);
    const messages: BaseMessage[] = [new HumanMessage('What is the weather in Paris?')];
    let reply: AIMessage | undefined;
    let toolCalls = 0;
    for (let step = 0; step < 5; step++) {
      reply = await model.invoke(messages);
      messages.push(reply);
      if (!reply.tool_calls?.length) break;
      for (const call of reply.tool_calls) {
        toolCalls += 1;
        expect(call.name).to.equal('get_weather');
        expect(call.args).to.have.property('city').that.is.a('string');
        messages.push(new ToolMessage({ tool_call_id: call.id!, content: '{"temperature": 21}' }));
      }
    }
    expect(toolCalls).to.equal(1);
    expect(reply!.tool_calls ?? []).to.deep.equal([]);
    expect(reply!.content)
      .to.be.a('string')
      .and.match(/^Going by what get_weather returned: /);
  });
});
