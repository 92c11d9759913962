import { expect } from 'chai';
import { eventually } from '../support/http.js';
import { captureLogs } from '../support/log-capture.js';
import { metricValue } from '../support/metrics.js';
import { RawConnection, rawRequest } from '../support/raw-http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// Node answers some requests itself, on the socket, without the application: a request its parser
// refuses (400) and one whose body stops arriving (408). The access log line and
// http_requests_total must record the status that went on the wire, not Koa's default 404.

describe('the access log and request counter for requests Node answers itself', () => {
  const { logger, lines } = captureLogs('info');
  let web: TestWeb;

  before(async () => {
    web = await startTestWeb({ logger, env: { HTTP_HEADERS_TIMEOUT_MS: '300', HTTP_REQUEST_TIMEOUT_MS: '300' } });
  });
  beforeEach(() => lines.splice(0));
  after(async () => web.close());

  const host = () => new URL(web.url).host;
  const counted = (labels: Record<string, string>) =>
    metricValue(web.app.metrics.registry, 'http_requests_total', labels);
  const accessLine = () =>
    eventually(async () => lines.find((l) => l.msg === 'request'), 'the access log line', 5000, 10);

  it('records a body that stops short of its Content-Length as the 408 it was answered with', async () => {
    const before = await counted({ route: '/v1/auth/signup', status: '408' });
    const c = new RawConnection(web.url);
    const headers: [string, string][] = [
      ['Host', host()],
      ['Content-Type', 'application/json'],
      ['Content-Length', '1000'],
    ];
    c.write(rawRequest('POST', '/v1/auth/signup', headers, '{"name":'));
    await c.closed;
    expect(c.text).to.match(/^HTTP\/1\.1 408 /);

    const line = await accessLine();
    expect(line).to.include({ method: 'POST', path: '/v1/auth/signup', status: 408 });
    expect(lines.filter((l) => l.msg === 'request')).to.have.length(1);
    expect(lines.filter((l) => l.level >= 50)).to.deep.equal([]);
    expect(await counted({ route: '/v1/auth/signup', status: '408' })).to.equal(before + 1);
    expect(await counted({ status: '404' })).to.equal(0);
  });

  it('records a chunked body Node’s parser refuses as the 400 it was answered with', async () => {
    const before = await counted({ route: '/v1/auth/signup', status: '400' });
    const c = new RawConnection(web.url);
    const headers: [string, string][] = [
      ['Host', host()],
      ['Content-Type', 'application/json'],
      ['Transfer-Encoding', 'chunked'],
    ];
    // "zz" is not a chunk size: the parser fails after the headers, with the request already routed.
    c.write(rawRequest('POST', '/v1/auth/signup', headers, 'zz\r\n{}\r\n0\r\n\r\n'));
    await c.closed;
    expect(c.text).to.match(/^HTTP\/1\.1 400 /);

    const line = await accessLine();
    expect(line).to.include({ method: 'POST', path: '/v1/auth/signup', status: 400 });
    expect(lines.filter((l) => l.level >= 50)).to.deep.equal([]);
    expect(await counted({ route: '/v1/auth/signup', status: '400' })).to.equal(before + 1);
    expect(await counted({ status: '404' })).to.equal(0);
  });

  it('records a request line Node’s parser refuses, which reaches no route, as the 400 it was answered with', async () => {
    const before = await counted({ route: 'unparsed', status: '400' });
    const c = new RawConnection(web.url);
    c.write('NOT A REQUEST\r\n\r\n');
    await c.closed;
    expect(c.text).to.match(/^HTTP\/1\.1 400 /);

    const line = await accessLine();
    expect(line).to.include({ status: 400 });
    expect(await counted({ route: 'unparsed', status: '400' })).to.equal(before + 1);
  });
});
