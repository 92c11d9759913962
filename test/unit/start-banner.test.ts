import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { expect } from 'chai';
import { loadConfig } from '../../src/config.js';
import { PROJECT_ROOT } from '../support/project.js';

interface Store {
  url: string;
  chosen: string;
}
interface BannerModule {
  storesBanner: (stores: {
    postgres: Store;
    redis: Store;
    env: Record<string, string | undefined>;
    freePorts?: Record<string, number>;
  }) => string[];
}

// Plain JavaScript outside the TypeScript build (it runs before anything is built), so it is
// imported from the checkout, not from dist/.
const BANNER = pathToFileURL(path.join(PROJECT_ROOT, 'scripts', 'lib', 'banner.mjs')).href;
let storesBanner: BannerModule['storesBanner'];

const localPostgres = {
  url: 'postgres://postgres@127.0.0.1:5432/completions_dev',
  chosen: 'the server on 127.0.0.1:5432',
};
const localRedis = { url: 'redis://127.0.0.1:6379', chosen: 'the server on 127.0.0.1:6379' };

describe('npm start: the lines naming the database and Redis it chose', () => {
  before(async () => {
    ({ storesBanner } = (await import(BANNER)) as BannerModule);
  });

  it('name the database URL, the Redis address and the key prefix, with where each came from', () => {
    const lines = storesBanner({ postgres: localPostgres, redis: localRedis, env: { REDIS_PREFIX: 'mine' } });
    expect(lines[0]).to.equal(
      'Postgres: postgres://postgres@127.0.0.1:5432/completions_dev (the server on 127.0.0.1:5432)',
    );
    expect(lines[1]).to.equal('Redis: redis://127.0.0.1:6379, key prefix "mine" (the server on 127.0.0.1:6379)');
  });

  it('say how to keep a second checkout apart, with a command naming another database, prefix and port', () => {
    const advice = storesBanner({ postgres: localPostgres, redis: localRedis, env: {} }).slice(2).join('\n');
    expect(advice).to.include(
      'DATABASE_URL=postgres://postgres@127.0.0.1:5432/completions_dev_b REDIS_PREFIX=svc_b PORT=8081 npm start',
    );
  });

  it('name in that command every port this instance binds, with the free ones it was given', () => {
    const env = { PORT: '9000', WORKER_METRICS_PORT: '9101', SCHEDULER_METRICS_PORT: '9102' };
    const freePorts = { PORT: 9001, WORKER_METRICS_PORT: 9103, SCHEDULER_METRICS_PORT: 9104 };
    const [said, command] = storesBanner({ postgres: localPostgres, redis: localRedis, env, freePorts }).slice(2);
    expect(said).to.include('PORT, WORKER_METRICS_PORT and SCHEDULER_METRICS_PORT');
    expect(command).to.match(/ PORT=9001 WORKER_METRICS_PORT=9103 SCHEDULER_METRICS_PORT=9104 npm start$/);
  });

  it('name a mail outbox at an absolute path, which two checkouts would share, and leave a relative one alone', () => {
    const shared = storesBanner({ postgres: localPostgres, redis: localRedis, env: { MAIL_DEV_DIR: '/srv/mail/' } });
    expect(shared[3]).to.match(/ MAIL_DEV_DIR=\/srv\/mail_b npm start$/);
    const own = storesBanner({ postgres: localPostgres, redis: localRedis, env: { MAIL_DEV_DIR: 'var/mail' } });
    expect(own.join('\n')).not.to.include('MAIL_DEV_DIR');
  });

  it('never print a password, in the user part or a query parameter, plain or percent-encoded', () => {
    const secret = 'S3cr:t/@pw';
    const encoded = encodeURIComponent(secret);
    const lines = storesBanner({
      postgres: {
        url: `postgres://app:${encoded}@db.internal:5432/completions_a?sslmode=require&password=${encoded}`,
        chosen: 'DATABASE_URL',
      },
      redis: { url: `rediss://default:${encoded}@cache.internal:6380/2`, chosen: 'REDIS_URL' },
      env: {},
    }).join('\n');
    for (const shown of [secret, encoded, 'S3cr', encodeURIComponent('S3cr:')]) expect(lines).to.not.include(shown);
    expect(lines).to.include(
      'Postgres: postgres://app:***@db.internal:5432/completions_a?sslmode=require&password=***',
    );
    expect(lines).to.include('rediss://default:***@cache.internal:6380/2');
  });

  it('never print a password from a Redis URL that has no user name', () => {
    const lines = storesBanner({
      postgres: localPostgres,
      redis: { url: 'redis://:hunter2hunter2@127.0.0.1:6379', chosen: 'REDIS_URL' },
      env: {},
    }).join('\n');
    expect(lines).to.not.include('hunter2');
    expect(lines).to.include('redis://:***@127.0.0.1:6379');
  });

  it('print no part of a URL that does not parse, since it could be all password', () => {
    const lines = storesBanner({
      postgres: { url: 'postgres://app:pa ss word@', chosen: 'DATABASE_URL' },
      redis: localRedis,
      env: {},
    }).join('\n');
    expect(lines).to.not.match(/pa ss|word/);
    expect(lines).to.match(/^Postgres: .*DATABASE_URL/m);
  });

  it('name the same key prefix the service reads from that environment, its default included', () => {
    for (const REDIS_PREFIX of [undefined, '', '  ', ' other ', 'checkout_b']) {
      const env = REDIS_PREFIX === undefined ? {} : { REDIS_PREFIX };
      const line = storesBanner({ postgres: localPostgres, redis: localRedis, env })[1]!;
      expect(line, `REDIS_PREFIX=${JSON.stringify(REDIS_PREFIX)}`).to.include(
        `key prefix "${loadConfig(env).redis.prefix}"`,
      );
    }
  });
});
