import { expect } from 'chai';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { Validator } from '@seriousme/openapi-schema-validator';
import { addSchemaKeywords, check } from '../../src/validation.js';
import { OPERATOR_TOKEN } from '../support/env.js';
import { get } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// ajv-formats is CommonJS with a default export.
const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;

interface Parameter {
  name: string;
  in: string;
  required?: boolean;
  schema?: Record<string, unknown>;
}
interface Media {
  schema?: unknown;
}
interface Operation {
  parameters?: Parameter[];
  requestBody?: { content: Record<string, Media> };
  responses: Record<string, { content?: Record<string, Media>; headers?: Record<string, Media> }>;
}
type PathItem = Record<string, Operation>;

const templateNames = (path: string) => [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]!);

/** JSON pointers (from the document's root) of every Schema Object the document holds. */
function schemaPointers(doc: {
  paths: Record<string, PathItem>;
  components: { schemas: Record<string, unknown> };
}): string[] {
  const where: (string | number)[][] = Object.keys(doc.components.schemas).map((name) => [
    'components',
    'schemas',
    name,
  ]);
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      const at = ['paths', path, method];
      (op.parameters ?? []).forEach((_, i) => where.push([...at, 'parameters', i, 'schema']));
      for (const [media, c] of Object.entries(op.requestBody?.content ?? {}))
        if (c.schema) where.push([...at, 'requestBody', 'content', media, 'schema']);
      for (const [status, r] of Object.entries(op.responses)) {
        for (const [media, c] of Object.entries(r.content ?? {}))
          if (c.schema) where.push([...at, 'responses', status, 'content', media, 'schema']);
        for (const name of Object.keys(r.headers ?? {}))
          where.push([...at, 'responses', status, 'headers', name, 'schema']);
      }
    }
  }
  return where.map((parts) => '#/' + parts.map((p) => String(p).replace(/~/g, '~0').replace(/\//g, '~1')).join('/'));
}

describe('GET /openapi.json of the whole service', () => {
  let web: TestWeb;
  let doc: { paths: Record<string, PathItem>; components: { schemas: Record<string, unknown> } } & Record<
    string,
    unknown
  >;

  before(async () => {
    web = await startTestWeb({ env: { ADMIN_TOKEN: OPERATOR_TOKEN } });
    const r = await get(`${web.url}/openapi.json`);
    expect(r.status).to.equal(200);
    doc = r.body;
  });
  after(() => web.close());

  it('is a valid OpenAPI 3.1 document, by @seriousme/openapi-schema-validator', async () => {
    const result = await new Validator().validate(doc);
    expect(result.errors ?? [], JSON.stringify(result.errors, null, 2)).to.deep.equal([]);
    expect(result.valid).to.equal(true);
  });

  // The validator above checks the document's structure but takes each Schema Object on trust, and
  // the response schemas are never compiled by the service itself: a misspelt keyword in one would
  // be silently ignored by every OpenAPI tool.
  it("holds only schemas that compile as JSON Schema 2020-12 in Ajv's strict mode, every $ref resolved", () => {
    // discriminator: OpenAPI's tagged unions, as the service's own validator reads them.
    const ajv = new Ajv2020({ strict: true, allowUnionTypes: true, discriminator: true });
    addFormats(ajv);
    addSchemaKeywords(ajv);
    // The document's own fields hold the schemas; they are not keywords of a schema themselves.
    for (const keyword of ['components', 'paths']) ajv.addKeyword({ keyword });
    const id = 'https://service.test/openapi.json';
    ajv.addSchema({ $id: id, components: doc.components, paths: doc.paths });
    const failures: string[] = [];
    for (const pointer of schemaPointers(doc)) {
      try {
        ajv.getSchema(id + pointer);
      } catch (err) {
        failures.push(`${pointer}: ${(err as Error).message}`);
      }
    }
    expect(failures).to.deep.equal([]);
  });

  it("writes path parameters the OpenAPI way, {model}, never Koa's :model", () => {
    const paths = Object.keys(doc.paths);
    expect(paths).to.include('/v1/models/{model}');
    expect(paths.filter((p) => p.includes(':'))).to.deep.equal([]);
  });

  it('declares the model of /v1/models/{model} as a required path parameter with a schema', () => {
    const params = doc.paths['/v1/models/{model}']!.get!.parameters ?? [];
    const model = params.find((p) => p.in === 'path' && p.name === 'model');
    expect(model, 'the model path parameter').to.not.equal(undefined);
    expect(model!.required).to.equal(true);
    expect(model!.schema).to.include({ type: 'string' });
  });

  it("declares exactly the template names of every path as its operations' path parameters", () => {
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        const declared = (op.parameters ?? []).filter((p) => p.in === 'path');
        expect(declared.map((p) => p.name).sort(), `${method.toUpperCase()} ${path}`).to.deep.equal(
          templateNames(path).sort(),
        );
        for (const p of declared) expect(p.required, `${method.toUpperCase()} ${path} {${p.name}}`).to.equal(true);
      }
    }
  });

  it('documents /health as it answers anyone and the operator, so a monitoring client can trust the document', async () => {
    const anyone = await get(`${web.url}/health`);
    const operator = await get(`${web.url}/health`, { bearer: OPERATOR_TOKEN });
    for (const r of [anyone, operator]) {
      const schema = doc.paths['/health']!.get!.responses[String(r.status)]!.content!['application/json']!
        .schema as Record<string, unknown>;
      expect(check(schema, r.body)).to.deep.equal({ ok: true });
    }
    expect(operator.body.info.model_backend).to.be.oneOf(['local', 'catalog']);
    expect(anyone.body).to.have.all.keys(anyone.status === 200 ? ['status'] : ['status', 'reason']);
  });
});
