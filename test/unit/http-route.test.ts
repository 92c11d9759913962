import { expect } from 'chai';
import { checkPathParams, openApiPath, pathParamNames } from '../../src/http/route.js';

const id = { type: 'string' };

describe('route path parameters', () => {
  it('reads the parameter names of a Koa path in order', () => {
    expect(pathParamNames('/v1/things/:thing/parts/:part_id')).to.deep.equal(['thing', 'part_id']);
    expect(pathParamNames('/v1/models')).to.deep.equal([]);
  });

  it('writes a Koa path as an OpenAPI path template', () => {
    expect(openApiPath('/v1/things/:thing/parts/:part_id')).to.equal('/v1/things/{thing}/parts/{part_id}');
    expect(openApiPath('/v1/models')).to.equal('/v1/models');
  });

  it('accepts a route whose params schema requires exactly its path parameters', () => {
    expect(() =>
      checkPathParams({
        method: 'get',
        path: '/a/:x',
        params: { type: 'object', required: ['x'], properties: { x: id } },
      }),
    ).to.not.throw();
    expect(() => checkPathParams({ method: 'get', path: '/a' })).to.not.throw();
  });

  it('refuses a path parameter the params schema does not declare', () => {
    expect(() => checkPathParams({ method: 'get', path: '/a/:x' })).to.throw(
      'GET /a/:x: path parameters [x] but params declares []',
    );
    expect(() =>
      checkPathParams({
        method: 'get',
        path: '/a/:x/:y',
        params: { type: 'object', required: ['x'], properties: { x: id } },
      }),
    ).to.throw('GET /a/:x/:y: path parameters [x, y] but params declares [x]');
  });

  it('refuses a params schema that declares a parameter the path does not have', () => {
    expect(() =>
      checkPathParams({
        method: 'get',
        path: '/a',
        params: { type: 'object', required: ['x'], properties: { x: id } },
      }),
    ).to.throw('GET /a: path parameters [] but params declares [x]');
  });

  it('refuses a path parameter that params does not require', () => {
    expect(() =>
      checkPathParams({ method: 'get', path: '/a/:x', params: { type: 'object', properties: { x: id } } }),
    ).to.throw('GET /a/:x: params must require every path parameter (x is optional)');
  });
});
