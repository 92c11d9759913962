import { expect } from 'chai';
import { Validator } from '@seriousme/openapi-schema-validator';
import { get } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

interface Parameter {
  name: string;
  in: string;
  required?: boolean;
  schema?: Record<string, unknown>;
}
type Operation = { parameters?: Parameter[] } & Record<string, unknown>;
type PathItem = Record<string, Operation>;

const templateNames = (path: string) => [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]!);

describe('GET /openapi.json of the whole service', () => {
  let web: TestWeb;
  let doc: { paths: Record<string, PathItem> } & Record<string, unknown>;

  before(async () => {
    web = await startTestWeb();
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

  it('writes path parameters the OpenAPI way, {model}, never Koa\'s :model', () => {
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

  it('declares exactly the template names of every path as its operations\' path parameters', () => {
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        const declared = (op.parameters ?? []).filter((p) => p.in === 'path');
        expect(declared.map((p) => p.name).sort(), `${method.toUpperCase()} ${path}`).to.deep.equal(templateNames(path).sort());
        for (const p of declared) expect(p.required, `${method.toUpperCase()} ${path} {${p.name}}`).to.equal(true);
      }
    }
  });
});
