import type { Env } from '../../src/config.js';
import { createContext, type AppContext } from '../../src/context.js';
import type { Clock } from '../../src/clock.js';
import type { Logger } from '../../src/logger.js';
import { startWebServer } from '../../src/http/server.js';
import type { RouteSpec } from '../../src/http/route.js';
import { testConfig } from './env.js';

export interface TestWeb {
  url: string;
  app: AppContext;
  close(): Promise<void>;
}

/** The real web tier in this process, on a free port, over real Postgres and Redis. */
export async function startTestWeb(
  opts: { env?: Env; clock?: Clock; routes?: RouteSpec[]; logger?: Logger } = {},
): Promise<TestWeb> {
  const config = testConfig(opts.env);
  const app = createContext(config, {
    role: 'web',
    ...(opts.clock ? { clock: opts.clock } : {}),
    ...(opts.logger ? { logger: opts.logger } : {}),
  });
  const running = await startWebServer(app, opts.routes);
  return {
    url: running.url,
    app,
    close: async () => {
      await running.stop();
      await app.close();
    },
  };
}
