import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import type { CoverageEligibilityResponse } from 'fhir/r4';
import { Pool } from 'pg';
import { projectRoot } from '../../src/mapping-files';
import { generateWebhookSecret, startSandbox, type Sandbox } from '../../src/sandbox';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import { frame } from '../../src/service/mllp-framing';
import { LIVE_NAMESPACE } from '../../src/sync/pg-live-lock';
import { forbiddenTerms } from '../hardening/log-terms';
import { httpBalancer, tcpBalancer, type Balancer, type Exchange } from '../support/balancer';
import { booking, sleep } from '../support/bookings';
import { startPostgres, type TestPostgres } from '../support/postgres';
import { bin, startServe, type Serve } from '../support/serve-process';
import { searchFhir, until } from '../sync/harness';
import { client, msa, type Client } from './mllp-client';

/**
 * Several `serve` processes on one PostgreSQL database, as a dental group runs them: the built
 * CLI, a load balancer in front (MLLP connections and the service's webhooks handed to each
 * instance in turn), the service (the sandbox, with a remote service's latency, half the payers
 * answering asynchronously) and the chart. A batch of bookings arrives from several connections
 * while one instance is killed with SIGKILL, or PostgreSQL restarts, with checks in hand. Every
 * booking answered AA ends with one verification at the service and one response in the chart.
 */
const COUNT = 100;
const SERVICE_POST = /^\/v2\/insurance-verification(s|-requests)$/;

/** Guardian (verified synchronously at the sandbox) and Cigna (asynchronously, by webhook) in turn. */
const halfAsync = (run: string, i: number) => booking(run, 4 * Math.floor(i / 2) + (i % 2));

/**
 * A PMS's sender on each of `lanes` connections through the balancer: one message at a time; one
 * unanswered when its connection drops, or answered CE, is sent again on a new connection. The ACK
 * each message finally got.
 */
async function sendEach(port: number, messages: string[], lanes: number, gapMs: number): Promise<string[]> {
  const answers: string[] = [];
  // The ACK to the message, or undefined: the connection closed (or nothing came for 10 s) before it.
  const answer = (c: Client, message: string) =>
    new Promise<string | undefined>((resolve) => {
      const before = c.acks.length;
      const done = () => {
        clearTimeout(timer);
        c.socket.off('data', arrived);
        resolve(c.acks[before]);
      };
      const arrived = () => void (c.acks.length > before && done());
      const timer = setTimeout(done, 10_000);
      c.socket.on('data', arrived);
      void c.closed.then(done);
      c.socket.write(frame(message));
    });
  await Promise.all(
    Array.from({ length: lanes }, async (_, lane) => {
      let c: Client | undefined;
      for (let i = lane; i < messages.length; i += lanes) {
        for (;;) {
          c ??= await client(port).catch(() => undefined);
          const ack = c && (await answer(c, messages[i] as string));
          if (ack !== undefined && msa(ack).code !== 'CE') {
            answers[i] = ack;
            break;
          }
          c?.socket.destroy();
          c = undefined;
          await sleep(100);
        }
        await sleep(gapMs);
      }
      c?.socket.end();
    }),
  );
  return answers;
}

interface Leased {
  key: string;
  state: string;
  lock: number;
}

describe('serve instances on PostgreSQL behind a load balancer', () => {
  let postgres: TestPostgres;
  const closing: Array<() => Promise<unknown>> = [];

  beforeAll(async () => {
    postgres = await startPostgres();
  }, 60_000);
  afterAll(async () => {
    for (const close of closing.reverse()) await close().catch(() => undefined);
    await postgres.stop();
  });

  /** One deployment: its database, service, chart, balancers and instances; `clockAheadMs` runs an instance's wall clock ahead, as its host's. */
  async function deploy(clockAheadMs: Record<string, number> = {}) {
    const store = await postgres.createDatabase();
    const sandbox: Sandbox = await startSandbox({ seed: true, timing: { asyncCompletionMs: 400, webhookBackoffMs: 100, latencyMs: 80, latencyJitterMs: 40 } });
    const fhir: FhirServer = await startFhirServer({ validate: true });
    // A pool: the test's connections end with a restart of the server too, and new ones are made.
    const db = new Pool({ connectionString: store, max: 2 });
    db.on('error', () => undefined);
    // The test cluster commits without waiting for its WAL, for speed; here an AA must outlive a crash of the server, as it does on one that waits.
    await db.query(`ALTER DATABASE ${new URL(store).pathname.slice(1)} SET synchronous_commit = on`);
    closing.push(() => sandbox.close(), () => fhir.close(), () => db.end());
    const secret = generateWebhookSecret();
    // Each instance calls the service through a proxy of its own: each POST is known by the instance that sent it.
    const services: Array<{ name: string; exchanges: Exchange[] }> = [];
    const instances: Array<{ name: string; dir: string; serve: Serve }> = [];

    const start = async (name: string, dir = mkdtempSync(path.join(tmpdir(), 'elig-instance-'))) => {
      writeFileSync(
        path.join(dir, 'config.json'),
        JSON.stringify({ logLevel: 'info', settings: { webhookDeadlineMs: 1500, pollAfterMs: 300, backoffBaseMs: 100, backoffMaxMs: 1000, idleMs: 50, concurrency: 8 } }),
      );
      const service = await httpBalancer([sandbox.port]);
      closing.push(() => service.close(), async () => rmSync(dir, { recursive: true, force: true }));
      const ahead = clockAheadMs[name];
      const env = {
        DENTAL_ELIG_BASE_URL: `http://127.0.0.1:${service.port}`,
        DENTAL_ELIG_API_KEY: sandbox.apiKey,
        DENTAL_ELIG_FHIR_URL: fhir.url,
        DENTAL_ELIG_WEBHOOK_SECRET: secret,
        ...(ahead !== undefined && { NODE_OPTIONS: `--max-semi-space-size=16 --require ${path.join(__dirname, '../support/clock-ahead.cjs')}`, CLOCK_AHEAD_MS: `${ahead}` }),
      };
      const serve = await startServe(dir, env, ['--store', store]);
      closing.push(async () => serve.child.kill('SIGKILL'));
      services.push({ name, exchanges: service.exchanges });
      instances.push({ name, dir, serve });
      return { name, dir, serve };
    };
    const [a, b] = await Promise.all([start('A'), start('B')]);
    const serving = () => instances.filter((i) => i.serve.child.exitCode === null && i.serve.child.signalCode === null);
    const mllp = await tcpBalancer([a.serve.mllpPort, b.serve.mllpPort]);
    const hooks = await httpBalancer([a.serve.httpPort, b.serve.httpPort]);
    closing.push(() => mllp.close(), () => hooks.close());
    sandbox.configureWebhook({ url: `http://127.0.0.1:${hooks.port}/webhooks/insurance-verification`, secret });
    const rebalance = (...balancers: Array<[Balancer, (s: Serve) => number]>) => balancers.forEach(([lb, port]) => (lb.ports = serving().map((i) => port(i.serve))));

    return {
      store,
      sandbox,
      fhir,
      db,
      a,
      b,
      mllp,
      hooks,
      /** Every request to the service, with the instance that made it. */
      exchanges: () => services.flatMap(({ name, exchanges }) => exchanges.map((x) => ({ ...x, instance: name }))),
      instances,
      /** Starts an instance again on its data dir and gives it its share of the balancers' traffic. */
      async restart(instance: { name: string; dir: string }) {
        const again = await start(`${instance.name} again`, instance.dir);
        rebalance([mllp, (s) => s.mllpPort], [hooks, (s) => s.httpPort]);
        return again;
      },
      /** Checks leased by a live or dead instance's lock, in the states a check is sent or its result awaited in. */
      async inHand(): Promise<Leased[]> {
        const { rows } = await db.query<Leased>(
          `SELECT key, state, lease_lock AS lock FROM checks WHERE lease_lock IS NOT NULL AND lease_until > now() AND state IN ('received', 'submitted', 'awaiting-result')`,
        );
        return rows;
      },
      async liveLocks(): Promise<number[]> {
        const { rows } = await db.query<{ key: number }>(
          `SELECT objid::integer AS key FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 AND objsubid = 2 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
          [LIVE_NAMESPACE],
        );
        return rows.map((r) => r.key);
      },
      async checks(): Promise<Array<{ key: string; state: string; externalId: string }>> {
        const { rows } = await db.query<{ key: string; state: string; externalId: string }>(`SELECT key, state, row->>'externalId' AS "externalId" FROM checks`);
        return rows;
      },
    };
  }
  type Deployment = Awaited<ReturnType<typeof deploy>>;

  /** Mid-batch: both instances hold checks they are sending or whose results they await, and `also`. */
  const bothHolding = (d: Deployment, also: () => boolean = () => true) =>
    until('checks in both instances\' hands', async () => {
      const rows = await d.inHand();
      const byLock = new Map<number, number>();
      for (const r of rows) byLock.set(r.lock, (byLock.get(r.lock) ?? 0) + 1);
      return byLock.size === 2 && [...byLock.values()].every((n) => n >= 2) && also() && rows;
    }, 20_000);

  const allWritten = (d: Deployment, timeoutMs: number) =>
    until(`all ${COUNT} checks written`, async () => {
      const rows = await d.checks().catch(() => []);
      return rows.length === COUNT && rows.every((r) => r.state === 'written') && rows;
    }, timeoutMs).catch(async (err: Error) => {
      const { rows } = await d.db.query(`SELECT key, state, lease_owner, lease_until, lease_lock, leased_at, due_at, row->>'attempts' AS attempts, row->>'lastError' AS error, now() FROM checks WHERE state <> 'written'`);
      const counts = await d.db.query(`SELECT (SELECT count(*) FROM checks) AS checks, (SELECT count(*) FROM appointments) AS appointments, (SELECT json_agg(json_build_object('kind', kind, 'status', status, 'detail', detail)) FROM messages WHERE status <> 'processed') AS messages`);
      throw new Error(`${err.message}: ${JSON.stringify(counts.rows)} ${JSON.stringify(rows, null, 1)}\nlocks ${JSON.stringify(await d.liveLocks())}\n${d.instances.map((i) => i.serve.stderr.join('')).join('\n')}`);
    });

  const cli = async (d: Deployment, ...args: string[]) => {
    const { stdout } = await promisify(execFile)(process.execPath, [bin, 'jobs', ...args, '--store', d.store, '--json'], { cwd: projectRoot });
    return JSON.parse(stdout) as Array<Record<string, unknown>>;
  };

  /** The POSTs to the service, by externalId: who sent each, when, and the verification it got. */
  const postsByExternalId = (d: Deployment) => {
    const posts = new Map<string, Array<Exchange & { instance: string; correlationId: unknown }>>();
    for (const x of d.exchanges().filter((e) => e.method === 'POST' && SERVICE_POST.test(e.path))) {
      const externalId = String((JSON.parse(x.body) as { externalId?: unknown }).externalId);
      posts.set(externalId, [...(posts.get(externalId) ?? []), { ...x, correlationId: correlationId(x.answer) }].sort((p, q) => p.at - q.at));
    }
    return posts;
  };

  /** What ends either road: every booking AA, every check verified once and written once, nothing kept as a dead letter, nothing of a patient in a log. */
  async function expectEachVerifiedAndWrittenOnce(d: Deployment, run: string, answers: string[]) {
    expect(answers.filter((ack) => msa(ack).code !== 'AA')).toEqual([]);
    expect(answers).toHaveLength(COUNT);
    const listed = await cli(d, 'list');
    expect(listed.filter((r) => r.state !== 'written')).toEqual([]);
    expect(new Set(listed.map((r) => r.job)).size).toBe(COUNT);
    expect(await cli(d, 'messages', '--dead')).toEqual([]);

    const posts = postsByExternalId(d);
    const checks = await d.checks();
    for (const c of checks) {
      const sent = posts.get(c.externalId) ?? [];
      expect(sent.length).toBeGreaterThan(0);
      // Sent again or not, one verification at the service.
      expect(new Set(sent.map((p) => p.correlationId)).size).toBe(1);
      expect(sent.every((p) => p.status === 201 || p.status === 202)).toBe(true);
    }
    expect(posts.size).toBe(COUNT);

    const responses = (await searchFhir(d.fhir, `CoverageEligibilityResponse?_count=${COUNT * 2}`)) as CoverageEligibilityResponse[];
    expect(responses).toHaveLength(COUNT);
    expect(new Set(responses.map((r) => r.request.reference)).size).toBe(COUNT);
    expect(new Set(responses.map((r) => r.identifier?.[0]?.value)).size).toBe(COUNT);
    expect(responses.every((r) => r.outcome === 'complete')).toBe(true);

    const patientData = [...forbiddenTerms(projectRoot).map((t) => t.pattern), /PATIENT\d/i, /19800102|1980-01-02/, new RegExp(`SBX-COMPLETE-${run}`, 'i')];
    for (const { serve } of d.instances) {
      const lines = serve.stderr.join('').split('\n').filter(Boolean);
      expect(lines.filter((line) => patientData.some((p) => p.test(line)))).toEqual([]);
    }
  }

  const correlationId = (body: string) => (body ? (JSON.parse(body) as { correlationId?: unknown }).correlationId : undefined);
  /** Verifications an instance requested asynchronously whose webhook has not been answered yet. */
  const awaitedWebhooks = (d: Deployment, instance: string) => {
    const answered = new Set(d.hooks.exchanges.filter((x) => x.status < 300).map((x) => correlationId(x.body)));
    return d
      .exchanges()
      .filter((x) => x.instance === instance && x.path === '/v2/insurance-verification-requests' && x.status < 300)
      .map((x) => correlationId(x.answer))
      .filter((id) => !answered.has(id));
  };

  /** Log lines at `level` (pino's number) or above, by instance; error by default. */
  const errors = (d: Deployment, level = 50) =>
    d.instances.flatMap(({ name, serve }) =>
      serve.stderr
        .join('')
        .split('\n')
        .filter((line) => line.startsWith('{') && (JSON.parse(line) as { level: number }).level >= level)
        .map((line) => `${name}: ${line}`),
    );

  it(`takes over the checks of an instance killed mid-batch: ${COUNT} bookings, each verified once and written once`, async () => {
    const d = await deploy();
    const messages = Array.from({ length: COUNT }, (_, i) => halfAsync('PG', i));
    let sent = false;
    const sending = sendEach(d.mllp.port, messages, 6, 40).finally(() => (sent = true));

    // A's checks in hand, and a verification it requested whose result the service is yet to send.
    await bothHolding(d, () => awaitedWebhooks(d, 'A').length > 0);
    const awaited = awaitedWebhooks(d, 'A');
    // What A holds as it dies, read while it is stopped: read before, A may finish some of it before the kill, which no one
    // takes up; read after, B may have taken them up already, its lock on them.
    d.a.serve.child.kill('SIGSTOP');
    const inHandAtKill = await d.inHand();
    d.a.serve.child.kill('SIGKILL');
    const killedAt = Date.now();
    expect(await d.a.serve.exited).toBeNull();
    expect(sent).toBe(false);
    // PostgreSQL drops the lock as it sees the connections close, a moment after the process is gone.
    const live = await until('the killed instance\'s live lock dropped', async () => {
      const keys = await d.liveLocks();
      return new Set(keys).size === 1 && keys;
    });
    const orphaned = inHandAtKill.filter((r) => !live.includes(r.lock)).map((r) => r.key);
    expect(orphaned.length).toBeGreaterThan(0);

    // The survivor finishes them at once: their leases (two minutes) are far from over.
    await until('the killed instance\'s checks written by the survivor', async () => {
      const rows = await d.checks();
      return orphaned.every((key) => rows.find((r) => r.key === key)?.state === 'written');
    }, 30_000);
    const takenOverMs = Date.now() - killedAt;
    // Said by whoever took them up, as a restart on SQLite says it of the process before it: a takeover was silent.
    const tookUp = d.instances
      .filter(({ name }) => name !== 'A')
      .flatMap(({ serve }) => serve.stderr.join('').split('\n').filter((line) => line.includes('took up the checks another worker had in hand')))
      .map((line) => (JSON.parse(line) as { checks: number }).checks);
    expect(tookUp.reduce((sum, n) => sum + n, 0)).toBeGreaterThanOrEqual(orphaned.length);
    await d.restart(d.a);
    const answers = await sending;
    await allWritten(d, 30_000);
    await expectEachVerifiedAndWrittenOnce(d, 'PG', answers);

    // Sent twice only where the killed instance had sent it and died before keeping the answer.
    const again = [...postsByExternalId(d).values()].filter((sent) => sent.length > 1);
    for (const sentTwice of again) expect(sentTwice.map((p) => p.instance)).toEqual(['A', expect.not.stringMatching(/^A$/)]);
    // The results of what the killed instance requested reached the survivor through the balancer.
    const survivor = d.hooks.exchanges.filter((x) => x.to === d.b.serve.httpPort && x.status < 300).map((x) => correlationId(x.body));
    expect(awaited.filter((id) => survivor.includes(id))).not.toEqual([]);
    expect(errors(d)).toEqual([]);
    console.log(`killed with ${orphaned.length} checks in hand, ${awaited.length} results awaited; taken over and written in ${takenOverMs} ms; ${again.length} sent again; all written ${Date.now() - killedAt} ms after the kill`);
  }, 90_000);

  it.each([
    ['fast', 'as an administrator restarts it'],
    ['immediate', 'as after a crash'],
  ] as const)(`loses and repeats nothing when PostgreSQL restarts (%s: %s) mid-batch under two instances: ${COUNT} bookings`, async (mode, _how) => {
    const d = await deploy();
    const messages = Array.from({ length: COUNT }, (_, i) => halfAsync('PR', i));
    let sent = false;
    const sending = sendEach(d.mllp.port, messages, 6, 40).finally(() => (sent = true));

    await bothHolding(d);
    const restartedAt = Date.now();
    await postgres.restart(mode);
    const restartMs = Date.now() - restartedAt;
    expect(sent).toBe(false);
    const answers = await sending;
    expect(answers.filter((ack) => msa(ack).code !== 'AA')).toEqual([]);
    await allWritten(d, 45_000);
    await expectEachVerifiedAndWrittenOnce(d, 'PR', answers);
    // The server away is said by each instance that met it once, and once more when it is back: no step, release or message says it again.
    // An instance whose checks in hand all waited on the service through a fast restart reads nothing of the store meanwhile, and meets none.
    expect(errors(d)).toEqual([]);
    const warnings = errors(d, 40).map((line) => ({ instance: line.slice(0, line.indexOf(':')), ...(JSON.parse(line.slice(line.indexOf('{'))) as { msg: string; outageMs?: number }) }));
    const said = d.instances.map(({ name }) => warnings.filter((w) => w.instance === name).map((w) => w.msg));
    for (const msgs of said) {
      expect([[], ['the job store is out of reach: checks, messages and webhooks wait for it, and nothing more is said until it answers', 'the job store answers again']]).toContainEqual(msgs);
    }
    expect(said.some((msgs) => msgs.length > 0)).toBe(true);
    // An answer of the service the store could not take as the server went is kept until it can: no check is sent twice.
    const again = [...postsByExternalId(d).values()].filter((sent) => sent.length > 1).length;
    expect(again).toBe(0);
    const away = warnings.flatMap((w) => (w.outageMs === undefined ? [] : [`${w.outageMs} ms`])).join(', ');
    console.log(`restarted (${mode}) in ${restartMs} ms; all written ${Date.now() - restartedAt} ms after; ${again} sent again; ${errors(d).length} error lines, ${warnings.length} warnings (store away ${away})`);
  }, 90_000);

  it(`takes none of another instance's checks when its host's clock runs three minutes ahead, past a lease: ${COUNT} bookings, each sent once`, async () => {
    const d = await deploy({ B: 3 * 60_000 });
    const answers = await sendEach(d.mllp.port, Array.from({ length: COUNT }, (_, i) => halfAsync('CK', i)), 6, 40);
    await allWritten(d, 45_000);
    await expectEachVerifiedAndWrittenOnce(d, 'CK', answers);
    // B judged A's leases by its own clock, and took the checks A had in hand, sending them again.
    const again = [...postsByExternalId(d).values()].filter((sent) => sent.length > 1);
    expect(again.map((sent) => sent.map((p) => p.instance))).toEqual([]);
    const b = d.b.serve.stderr.join('');
    expect(b).not.toContain('took up the checks another worker had in hand');
    expect(b).toContain("this machine's clock differs from the job store's database: checks are timed by the database's clock");
    expect(errors(d)).toEqual([]);
    const sentBy = d.exchanges().filter((x) => x.method === 'POST' && SERVICE_POST.test(x.path));
    console.log(`B three minutes ahead: A sent ${sentBy.filter((x) => x.instance === 'A').length}, B ${sentBy.filter((x) => x.instance === 'B').length}; ${again.length} sent twice`);
  }, 90_000);

  it('refuses a database password on the command line', async () => {
    const run = await promisify(execFile)(process.execPath, [bin, 'jobs', 'list', '--store', 'postgres://u:secret@127.0.0.1:1/db'], { cwd: projectRoot }).catch((e: { code: number; stderr: string }) => e);
    expect('code' in run ? run.code : 0).toBe(2);
    expect(run.stderr).toBe('dental-elig: --store: a password does not belong on the command line; set PGPASSWORD, or the whole URL in DENTAL_ELIG_STORE\n');
  });
});
