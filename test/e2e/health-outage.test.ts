import { expect } from 'chai';
import { OPERATOR_TOKEN } from '../support/env.js';
import { eventually, get } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { TcpProxy } from '../support/tcp-proxy.js';

/** The same URL with host and port pointed at the proxy. */
function via(proxy: TcpProxy, url: string): string {
  const u = new URL(url);
  u.hostname = '127.0.0.1';
  u.port = String(proxy.port);
  return u.toString();
}

describe('/health when a dependency goes away', () => {
  let pgProxy: TcpProxy;
  let redisProxy: TcpProxy;
  let web: RoleProcess;
  let worker: RoleProcess;

  before(async () => {
    // Straight to Redis: /health is 200 only while a live completion worker is registered.
    worker = await startRole('worker');
    const pgUrl = new URL(process.env.DATABASE_URL!);
    const redisUrl = new URL(process.env.REDIS_URL!);
    pgProxy = await new TcpProxy(pgUrl.hostname, Number(pgUrl.port || 5432)).start();
    redisProxy = await new TcpProxy(redisUrl.hostname, Number(redisUrl.port || 6379)).start();
    web = await startRole('web', {
      DATABASE_URL: via(pgProxy, process.env.DATABASE_URL!),
      REDIS_URL: via(redisProxy, process.env.REDIS_URL!),
      ADMIN_TOKEN: OPERATOR_TOKEN,
    });
  });
  after(async () => {
    await Promise.all([web.stop(), worker.stop()]);
    await pgProxy.cut();
    await redisProxy.cut();
  });

  // As the operator: the checks are what these tests read.
  const health = () => get(`${web.url}/health`, { bearer: OPERATOR_TOKEN });
  const when = (status: number) => async () => {
    const r = await health();
    return r.status === status ? r : undefined;
  };

  it('is 200 while Postgres and Redis answer', async () => {
    expect((await health()).status).to.equal(200);
  });

  it('turns 503 naming redis when Redis stops, and recovers when it returns', async () => {
    await redisProxy.cut();
    const down = await eventually(when(503), '/health to report Redis down');
    expect(down.body.down).to.include('redis');
    expect(down.body.checks.redis.status).to.equal('down');
    expect(down.body.checks.postgres.status).to.equal('ok');
    await redisProxy.restore();
    const up = await eventually(when(200), '/health to recover after Redis returns');
    expect(up.body.down).to.deep.equal([]);
  });

  it('forbids caching its answer, up or down, so no proxy serves a stale state', async () => {
    expect((await health()).headers.get('cache-control')).to.equal('no-store');
    await redisProxy.cut();
    const down = await eventually(when(503), '/health to report Redis down');
    expect(down.headers.get('cache-control')).to.equal('no-store');
    await redisProxy.restore();
    await eventually(when(200), '/health to recover after Redis returns');
  });

  it('takes the web process out of readiness when Postgres stops, keeps it live, and puts it back when Postgres returns', async () => {
    await pgProxy.cut();
    const notReady = await eventually(async () => {
      const r = await get(`${web.url}/health/ready`);
      return r.status === 503 ? r : undefined;
    }, '/health/ready to report Postgres down');
    expect(notReady.body).to.deep.equal({ status: 'unavailable', reason: 'postgres_unreachable' });
    expect((await get(`${web.url}/health/live`)).status).to.equal(200);
    await pgProxy.restore();
    await eventually(async () => (await get(`${web.url}/health/ready`)).status === 200 || undefined, 'ready again');
  });

  it('turns 503 naming postgres when Postgres stops, and recovers when it returns', async () => {
    await pgProxy.cut();
    const down = await eventually(when(503), '/health to report Postgres down');
    expect(down.body.down).to.deep.equal(['postgres']);
    await pgProxy.restore();
    const up = await eventually(when(200), '/health to recover after Postgres returns');
    expect(up.body.checks.postgres.status).to.equal('ok');
  });
});
