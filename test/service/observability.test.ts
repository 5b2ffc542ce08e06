import { once } from 'node:events';
import type { ServerResponse } from 'node:http';
import { connect } from 'node:net';
import { request } from 'undici';
import { Webhook } from 'standardwebhooks';
import { bodyBytesReading, HTTP_MAX_CONNECTIONS } from '../../src/connection-limits';
import { startHttpServer } from '../../src/service/http-server';
import { WEBHOOK_PATH } from '../../src/verification/webhook';
import { createLogger } from '../../src/service/logger';
import { STORE_ANSWER_MS } from '../../src/service/metrics';
import { loadHl7Mappings } from '../../src/adapters/hl7';
import { bookingFor } from '../support/bookings';
import { NO_URL_PATH, rawRequest } from '../support/http-server';
import { freePort } from '../bench/processes';
import { chartOf, startHarness, until, type Harness, type HarnessOptions } from '../sync/harness';
import { resultBody } from '../sync/worker-rig';

describe('observability', () => {
  /** The harnesses the test under way started, each closed once after it: none is left to the next test's afterEach. */
  let opened: Harness[] = [];
  const harness = async (options?: HarnessOptions): Promise<Harness> => {
    const started = await startHarness(options);
    opened.push(started);
    return started;
  };
  afterEach(async () => {
    const closing = opened;
    opened = [];
    await Promise.all(closing.map((started) => started.close()));
  });

  it('answers /healthz with the store and the downstreams, and /metrics with the pipeline counters', async () => {
    const h = await harness();
    await h.fhir.seed(chartOf('self'));
    const before = await (await fetch(`${h.httpUrl}/metrics`)).text();
    const sent = Date.now() / 1000;
    await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-1001`, { method: 'POST' });
    await until('written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);

    const health = await fetch(`${h.httpUrl}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ ok: true, store: 'ok', fhir: 'ok', service: 'ok' });

    // The check is stored as written a moment before the worker lets go of it.
    const metrics = await until('the worker done with the check', async () => {
      const text = await (await fetch(`${h.httpUrl}/metrics`)).text();
      return /^dental_elig_checks_in_hand 0$/m.test(text) && text;
    });
    expect(metrics).toMatch(/^dental_elig_checks\{state="written"\} 1$/m);
    expect(metrics).toMatch(/^dental_elig_outcomes_total\{outcome="completed"\} 1$/m);
    expect(metrics).toMatch(/^dental_elig_messages_total\{type="fhir-notification",ack="stored"\} 1$/m);
    expect(metrics).toMatch(/^dental_elig_queue_depth 0$/m);
    // Nothing written yet, then the time the check was written.
    expect(before).toMatch(/^dental_elig_last_written_timestamp_seconds 0$/m);
    // The series known beforehand are there at 0: one born at its first event with 1 shows increase() nothing, and an alert on it missed that event.
    for (const series of ['dental_elig_failures_total{kind="InvalidCredentials"}', 'dental_elig_failures_total{kind="Unknown"}', 'dental_elig_webhooks_total{result="refused"}', 'dental_elig_webhooks_total{result="not-received"}', 'dental_elig_messages_total{type="fhir-notification",ack="refused"}']) {
      expect(before.split('\n')).toContain(`${series} 0`);
    }
    const written = Number(/^dental_elig_last_written_timestamp_seconds (\S+)$/m.exec(metrics)?.[1]);
    expect(written).toBeGreaterThanOrEqual(sent);
    expect(written).toBeLessThanOrEqual(Date.now() / 1000);
    expect(metrics).toMatch(/^dental_elig_request_duration_seconds_count\{target="service",operation="(verify|request verification)",ok="true"\} 1$/m);
    expect(metrics).toMatch(/^dental_elig_request_duration_seconds_count\{target="fhir",operation="write eligibility",ok="true"\} 1$/m);
    // The process's own, as any Node service gives them.
    expect(Number(/^process_resident_memory_bytes (\d+)$/m.exec(metrics)?.[1])).toBeGreaterThan(10 * 2 ** 20);
    expect(metrics).toMatch(/^nodejs_heap_size_used_bytes \d+$/m);
  });

  it('counts HL7 messages by the types a sender may send, not by whatever MSH-9 holds', async () => {
    const h = await harness();
    const msh = (type: string, id: string) => `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|2026||${type}|${id}|P|2.5.1\rPID|1`;
    for (let i = 0; i < 5; i++) await h.sync.receiveHl7(msh(`Z${i}${'Q'.repeat(2000)}^E${i}`, `U${i}`));
    await h.sync.receiveHl7(msh(`SIU^S${'9'.repeat(2000)}`, 'U5'));
    await h.sync.receiveHl7(msh('SIU^S18^SIU_S12', 'U6'));
    // An engine that writes the codes in lower case sends the same type.
    await h.sync.receiveHl7(msh('siu^s18^siu_s12', 'U7'));
    // Resends, answered as before and applied no more: under the type their first delivery was counted by.
    await h.sync.receiveHl7(msh('SIU^S18^SIU_S12', 'U6'));
    await h.sync.receiveHl7(msh(`Z0${'Q'.repeat(2000)}^E0`, 'U0'));
    const metrics = await (await fetch(`${h.httpUrl}/metrics`)).text();
    expect(metrics).not.toContain('Q'.repeat(50));
    expect(metrics).not.toContain('9'.repeat(50));
    expect(metrics).toMatch(/^dental_elig_messages_total\{type="unsupported",ack="AR"\} 5$/m);
    expect(metrics).toMatch(/^dental_elig_messages_total\{type="SIU\^S18",ack="AA"\} 2$/m);
    expect(metrics).toMatch(/^dental_elig_messages_total\{type="SIU\^S18",ack="duplicate"\} 1$/m);
    expect(metrics).toMatch(/^dental_elig_messages_total\{type="unsupported",ack="duplicate"\} 1$/m);
    expect(metrics).not.toContain('type="unknown"');
  });

  it("counts a resend under its sender's own profile, as its first delivery: a type another sender's dialect takes stays unsupported", async () => {
    const mappings = loadHl7Mappings();
    // This sender's dialect takes bookings alone: an S18, which the default profile acknowledges, is refused from it.
    const own = { ...mappings.defaultProfile, name: 'bookings-only', sendingApplications: ['SMILECLOUD'], events: { 'SIU^S12': 'book' as const }, acknowledgeOnly: [] };
    const h = await harness({ mappings: { ...mappings, dialects: [...mappings.dialects, own] } });
    const s18 = 'MSH|^~\\&|SMILECLOUD^SC|BSD-MAIN|ELIG|BSD|2026||SIU^S18^SIU_S12|R1|P|2.5.1\rPID|1';
    expect((await h.sync.receiveHl7(s18))[0]?.code).toBe('AR');
    expect((await h.sync.receiveHl7(s18))[0]?.code).toBe('AR');
    const metrics = await (await fetch(`${h.httpUrl}/metrics`)).text();
    expect(metrics).toMatch(/^dental_elig_messages_total\{type="unsupported",ack="AR"\} 1$/m);
    expect(metrics).toMatch(/^dental_elig_messages_total\{type="unsupported",ack="duplicate"\} 1$/m);
    expect(metrics).not.toContain('type="SIU^S18"');
  });

  it('logs an HL7 message refused with AE or AR by its stored id and where it is wrong, never what it holds', async () => {
    const h = await harness();
    // SCH-11 left empty: the appointment has no start.
    const booking = bookingFor('R1', 'DD1234567').replace('^^^20261210093000', '');
    const acks = await h.sync.receiveHl7(booking);
    expect(acks[0]?.code).toBe('AE');
    const [dead] = await h.store.listMessages({ status: 'dead' });
    const refused = h.logs.map((line) => JSON.parse(line) as Record<string, unknown>).filter((l) => l.msg === 'HL7 message refused; kept as a dead letter (jobs messages --dead)');
    expect(refused).toEqual([expect.objectContaining({ level: 40, message: dead?.id, type: 'SIU^S12', ack: 'AE', problem: dead?.detail?.replace(/^rejected: /, '') })]);
    expect(JSON.stringify(refused)).not.toMatch(/DD1234567|DOE|19800102/);
  });

  it('counts a failed verification once under its kind, though the check that got it also needs a person; a kind failure-kinds.json does not list as Unknown', async () => {
    const h = await harness();
    await h.sync.receiveHl7(bookingFor('F1', 'SBX-FAIL-PatientNotFound'));
    // The service names kinds: each new name would be a new series.
    await h.sync.receiveHl7(bookingFor('F2', 'SBX-FAIL-Zq9NovelKind'));
    await until('the checks to need a person', async () => (await h.store.listChecks({ states: ['needs-attention'] })).length === 2);
    const metrics = await (await fetch(`${h.httpUrl}/metrics`)).text();
    expect(metrics).toMatch(/^dental_elig_outcomes_total\{outcome="failed"\} 2$/m);
    expect(metrics).toMatch(/^dental_elig_failures_total\{kind="PatientNotFound"\} 1$/m);
    expect(metrics).toMatch(/^dental_elig_failures_total\{kind="Unknown"\} 1$/m);
    expect(metrics).not.toContain('Zq9NovelKind');
    // The log line names it, for the person who looks.
    expect(h.logs.some((line) => line.includes('"failureKind":"Zq9NovelKind"'))).toBe(true);
  });

  it('counts each outcome a check stored: one given up as NotVerified and answered by its late webhook counts under both', async () => {
    // A counter cannot take back the give-up it counted, which the failed event told when it came.
    const h = await harness({ settings: { maxAttempts: 2, pendingGiveUpMs: 200 } });
    await h.sync.receiveHl7(bookingFor('G1', 'SBX-503'));
    const given = await until('the check given up', async () => (await h.store.listChecks({ states: ['needs-attention'] }))[0]);
    // Its round's result after all: the service had taken a send whose answer was lost.
    const body = JSON.stringify({ ...(resultBody('completed-minimal') as object), correlationId: 'ver-late', externalId: given.externalId });
    const at = new Date();
    const headers = { 'content-type': 'application/json', 'webhook-id': 'msg_late', 'webhook-timestamp': String(Math.floor(at.getTime() / 1000)), 'webhook-signature': new Webhook(h.secret).sign('msg_late', at, body) };
    expect((await fetch(`${h.httpUrl}${WEBHOOK_PATH}`, { method: 'POST', headers, body })).status).toBe(204);
    await until('the late result written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
    const metrics = await (await fetch(`${h.httpUrl}/metrics`)).text();
    expect(metrics).toMatch(/^dental_elig_outcomes_total\{outcome="failed"\} 1$/m);
    expect(metrics).toMatch(/^dental_elig_failures_total\{kind="NotVerified"\} 1$/m);
    expect(metrics).toMatch(/^dental_elig_outcomes_total\{outcome="completed"\} 1$/m);
    // Where the check is now: the gauge by state.
    expect(metrics).toMatch(/^dental_elig_checks\{state="written"\} 1$/m);
    expect(metrics).not.toMatch(/^dental_elig_checks\{state="needs-attention"\}/m);
  });

  it("counts and warns of a webhook kept as a dead letter, another request's result under a check's correlation id, as every dead letter is", async () => {
    const h = await harness({ sandbox: { seed: true, timing: { asyncCompletionMs: 60_000 } }, settings: { webhookDeadlineMs: 60_000 } });
    await h.sync.receiveHl7(bookingFor('M1', 'DD1234567'));
    const waiting = await until('the check awaiting its result', async () => (await h.store.listChecks({ states: ['awaiting-result'] }))[0]);
    const body = JSON.stringify({ ...(resultBody('completed-minimal') as object), correlationId: waiting.correlationId, externalId: 'elig_another_patients_request' });
    const at = new Date();
    const headers = { 'content-type': 'application/json', 'webhook-id': 'msg_mixed', 'webhook-timestamp': String(Math.floor(at.getTime() / 1000)), 'webhook-signature': new Webhook(h.secret).sign('msg_mixed', at, body) };
    expect((await fetch(`${h.httpUrl}${WEBHOOK_PATH}`, { method: 'POST', headers, body })).status).toBe(204);
    const metrics = await (await fetch(`${h.httpUrl}/metrics`)).text();
    expect(metrics).toMatch(/^dental_elig_webhooks_total\{result="dead"\} 1$/m);
    expect(metrics).toMatch(/^dental_elig_webhooks_total\{result="ignored"\} 0$/m);
    const said = h.logs.map((line) => JSON.parse(line) as Record<string, unknown>).filter((l) => l.webhookId === 'msg_mixed');
    expect(said).toEqual([expect.objectContaining({ level: 40, result: 'dead', msg: expect.stringContaining('names externalId elig_another_patients_request') })]);
  });

  it('counts the webhook deliveries it refused, unsigned, stale or too large, which no other count shows', async () => {
    // Every delivery refused (a secret rotated too soon, a clock skewed) leaves the results to the poll: an alert watches this.
    const h = await harness();
    const post = async (body: string, at: Date | undefined) => {
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (at) Object.assign(headers, { 'webhook-id': 'msg_refused', 'webhook-timestamp': String(Math.floor(at.getTime() / 1000)), 'webhook-signature': new Webhook(h.secret).sign('msg_refused', at, body) });
      return (await fetch(`${h.httpUrl}${WEBHOOK_PATH}`, { method: 'POST', headers, body })).status;
    };
    const body = JSON.stringify(resultBody('completed-minimal'));
    expect([await post(body, undefined), await post(body, new Date(Date.now() - 10 * 60_000)), await post(`${body}${' '.repeat(1024 * 1024)}`, new Date())]).toEqual([401, 401, 413]);
    const metrics = await (await fetch(`${h.httpUrl}/metrics`)).text();
    expect(metrics).toMatch(/^dental_elig_webhooks_total\{result="refused"\} 3$/m);
    expect(metrics).toMatch(/^dental_elig_webhooks_total\{result="dead"\} 0$/m);
  });

  it('counts and warns of a FHIR notification kept as a dead letter, refused whole or for one resource it names, as every dead letter is', async () => {
    const h = await harness();
    await h.fhir.seed(chartOf('self'));
    const notify = async (path: string, body?: string) => (await fetch(`${h.httpUrl}/fhir-notifications${path}`, { method: 'POST', headers: { 'content-type': 'application/fhir+json' }, ...(body !== undefined && { body }) })).status;
    expect(await notify('', '{"resourceType": "Appointment", "id": ')).toBe(400);
    // The chart has no such appointment: refused for it, the one beside it handled.
    const bundle = { resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: 'Appointment/appt-gone' }, { fullUrl: 'Appointment/appt-1001' }] };
    expect(await notify('', JSON.stringify(bundle))).toBe(422);
    const metrics = await (await fetch(`${h.httpUrl}/metrics`)).text();
    expect(metrics).toMatch(/^dental_elig_messages_total\{type="fhir-notification",ack="dead"\} 2$/m);
    expect(metrics).toMatch(/^dental_elig_messages_total\{type="fhir-notification",ack="stored"\} 1$/m);
    const said = h.logs.map((line) => JSON.parse(line) as Record<string, unknown>).filter((l) => l.msg === 'FHIR notification refused; kept as a dead letter (jobs messages --dead)');
    expect(said).toEqual([
      expect.objectContaining({ level: 40, status: 400, reason: expect.stringMatching(/^body is not valid JSON at line 1, column/) }),
      // The id left out wherever it stands (a chart's may be made of a name: pat-marco); jobs messages --dead has it.
      expect.objectContaining({ level: 40, status: 422, reason: 'Appointment/(id): Appointment: the server has no Appointment with id (id)' }),
    ]);
  });

  it('says the store fails when it does not answer at all, as a database that stops answering without closing its connections does, rather than holding /healthz', async () => {
    const h = await harness();
    // The pool would wait 10 s for a connection, 60 s for a query: past a balancer's timeout, the health check says nothing.
    jest.spyOn(h.store, 'ping').mockReturnValue(new Promise<never>(() => undefined));
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask', 'hrtime', 'performance', 'Date'] });
    try {
      const said = h.sync.health();
      await jest.advanceTimersByTimeAsync(STORE_ANSWER_MS);
      expect(await said).toMatchObject({ ok: false, store: 'failing: no answer in 5 s', fhir: 'ok' });
    } finally {
      jest.useRealTimers();
    }
  });

  it('answers /healthz 503, stopping, once the sync is stopping, so a balancer routes elsewhere while its checks in hand finish', async () => {
    // Each send held 1.5 s at the service: the stop waits for the one in hand.
    const h = await harness({ sandbox: { timing: { latencyMs: 1500, latencyJitterMs: 0 } } });
    await h.sync.receiveHl7(bookingFor('S1', 'SBX-COMPLETE'));
    await until('the check in hand', async () => (await h.store.listChecks({ states: ['submitted'] })).length === 1);
    expect((await fetch(`${h.httpUrl}/healthz`)).status).toBe(200);
    const stopped = h.sync.stop();
    const health = await fetch(`${h.httpUrl}/healthz`);
    expect([health.status, await health.json()]).toEqual([503, expect.objectContaining({ ok: false, stopping: true })]);
    await stopped;
  });

  it('logs a 5xx a mounted endpoint answers, once, whether it threw (at once or later) or answered it itself, naming the mount and what it threw by its kind, not the path or the error\'s text', async () => {
    const h = await harness();
    // What a mount in front of a chart throws: fhir-kit-client's errors say the URL asked, a search's parameters unquoted.
    const asked = 'HTTP 500: GET http://chart.example/fhir/Patient?family=Zygmuntowicz&birthdate=1984-03-02&identifier=DD1234567';
    const mounts = [
      { prefix: '/later', handle: () => Promise.reject(new Error(asked)) },
      { prefix: '/at-once', handle: () => { throw Object.assign(new TypeError('fetch failed for "Zygmuntowicz"'), { cause: Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }) }); } },
      { prefix: '/itself', handle: (_req: unknown, res: ServerResponse) => void res.writeHead(500).end() },
      { prefix: '/fine', handle: (_req: unknown, res: ServerResponse) => void res.writeHead(404).end() },
    ];
    const mounted = await startHttpServer(() => h.sync, { mounts });
    try {
      const url = `http://${mounted.host}:${mounted.port}`;
      for (const prefix of ['/later', '/at-once', '/itself', '/fine']) {
        expect([prefix, (await fetch(`${url}${prefix}/Patient/pat-zygmuntowicz`)).status]).toEqual([prefix, prefix === '/fine' ? 404 : 500]);
      }
      const said = h.logs.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.mount !== undefined);
      expect(said).toEqual([
        expect.objectContaining({ level: 50, mount: '/later', method: 'GET', status: 500, err: 'Error', msg: '/later answered 500' }),
        expect.objectContaining({ level: 50, mount: '/at-once', method: 'GET', status: 500, err: 'TypeError (ECONNREFUSED)', msg: '/at-once answered 500' }),
        expect.objectContaining({ level: 50, mount: '/itself', method: 'GET', status: 500, msg: '/itself answered 500' }),
      ]);
      expect(h.logs.join('\n')).not.toMatch(/zygmuntowicz|1984-03-02|DD1234567/i);
    } finally {
      await mounted.close();
    }
  });

  it('says the chart is unreachable when the FHIR server is down', async () => {
    // Nothing listening where the sync looks for its chart: the harness's own stays up, closed once with it.
    const h = await harness({ fhirVia: async () => `http://127.0.0.1:${await freePort()}/fhir/R4` });
    const health = await fetch(`${h.httpUrl}/healthz`);
    expect(health.status).toBe(503);
    expect(await health.json()).toMatchObject({ ok: false, store: 'ok', fhir: 'unreachable' });
  });

  it('answers 503 with Retry-After while the sync is not there yet (the store still opening), and serves once it is', async () => {
    const started = await harness();
    let ready = false;
    const early = await startHttpServer(() => (ready ? started.sync : undefined));
    try {
      const url = `http://${early.host}:${early.port}`;
      for (const [path, method] of [['/healthz', 'GET'], ['/metrics', 'GET'], [WEBHOOK_PATH, 'POST'], ['/fhir-notifications/Appointment/a', 'POST']] as const) {
        const res = await fetch(`${url}${path}`, { method });
        expect([path, res.status, res.headers.get('retry-after')]).toEqual([path, 503, '5']);
        expect(await res.json()).toMatchObject({ status: 503, detail: 'starting: try again shortly' });
      }
      ready = true;
      expect((await fetch(`${url}/healthz`)).status).toBe(200);
    } finally {
      await early.close();
    }
  });

  it('answers its errors as problem details of one shape: about:blank titled by the status, the connection closed', async () => {
    const started = await harness();
    for (const [path, method, status, title] of [['/no-such-endpoint', 'GET', 404, 'Not Found'], ['/fhir-notifications/Appointment/a', 'GET', 405, 'Method Not Allowed']] as const) {
      const res = await fetch(`${started.httpUrl}${path}`, { method });
      expect([path, res.status, res.headers.get('content-type'), res.headers.get('connection')]).toEqual([path, status, 'application/problem+json', 'close']);
      const body = (await res.json()) as Record<string, unknown>;
      expect(body).toEqual({ title, status, detail: expect.any(String) });
    }
  });

  it('answers 400 to a request target that is no URL path, such as //, and serves on', async () => {
    const started = await harness();
    // new URL threw on it in the request listener, which ended the process.
    const said = await rawRequest(started.httpUrl, NO_URL_PATH);
    expect(said.split('\r\n')[0]).toBe('HTTP/1.1 400 Bad Request');
    expect(said).toContain('"detail":"the request target is not a URL path"');
    expect((await fetch(`${started.httpUrl}/healthz`)).status).toBe(200);
  });

  it(`has at most ${HTTP_MAX_CONNECTIONS} connections open, closing those past them as they come, and says so once`, async () => {
    const started = await harness();
    const { hostname, port } = new URL(started.httpUrl);
    const idle = Array.from({ length: HTTP_MAX_CONNECTIONS }, () => connect(Number(port), hostname));
    try {
      await Promise.all(idle.map((socket) => once(socket, 'connect')));
      // Idle connections that send nothing: past them, a request finds its connection closed, not answered. Each probe on a
      // connection of its own: one the server took before the last idle one, kept alive, would be answered again and again.
      await until('a connection past the cap closed', async () => (await request(`${started.httpUrl}/healthz`, { reset: true }).then(() => 'answered', () => 'closed')) === 'closed');
      const warned = started.logs.filter((line) => line.includes('HTTP connection refused: too many open'));
      expect(warned).toHaveLength(1);
      idle.pop()?.destroy();
      await until('a place free again', async () => (await fetch(`${started.httpUrl}/healthz`).then((res) => res.status, () => 0)) === 200);
    } finally {
      for (const socket of idle) socket.destroy();
    }
  });

  it('has at most 32 requests of one connection in hand, answering those pipelined past them 429, and serves others meanwhile', async () => {
    const started = await harness();
    // A store that answers only when the test lets it: the answers of a peer pipelining /healthz are still being made as more arrive.
    const health = started.sync.health.bind(started.sync);
    let asked = 0;
    let answer = () => {};
    const answering = new Promise<void>((resolve) => (answer = resolve));
    jest.spyOn(started.sync, 'health').mockImplementation(async () => {
      asked++;
      await answering;
      return health();
    });
    const { hostname, port } = new URL(started.httpUrl);
    const peer = connect(Number(port), hostname);
    await once(peer, 'connect');
    peer.pause();
    peer.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(5000));
    // The 33rd is answered 429 at once (below): none is taken past 32 while they are in hand.
    await until('32 requests in hand', async () => asked >= 32);
    expect((await fetch(`${started.httpUrl}/metrics`)).status).toBe(200);
    expect(asked).toBe(32);
    answer();
    let said = '';
    peer.on('data', (chunk: Buffer) => (said += chunk.toString())).resume();
    await once(peer, 'close');
    const statuses = [...said.matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map(([, status]) => status);
    expect(statuses.slice(0, 33)).toEqual([...Array<string>(32).fill('200'), '429']);
    expect(said).toContain('more than 32 requests in hand on one connection: read the answers before sending more');
  });

  it('reads at most 64 MiB of request bodies at once, over every connection, answering those past it 503 with Retry-After until the others are done', async () => {
    const started = await harness();
    const { hostname, port } = new URL(started.httpUrl);
    // Peers that send a webhook's body nearly whole, 1 MiB declared, and hold it: read, each is held until it ends.
    const holders = await Promise.all(
      Array.from({ length: 70 }, async () => {
        const peer = connect(Number(port), hostname);
        await once(peer, 'connect');
        let said = '';
        peer.on('data', (chunk: Buffer) => (said += chunk.toString()));
        peer.on('error', () => undefined);
        peer.write(`POST ${WEBHOOK_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: ${1024 * 1024}\r\n\r\n`);
        peer.write(Buffer.alloc(1024 * 1024 - 1, 'a'));
        return { peer, said: () => said };
      }),
    );
    try {
      await until('the bodies past 64 MiB refused', async () => holders.filter((h) => h.said().startsWith('HTTP/1.1 503')).length >= 6);
      // And the 64 taken read whole: a refused body gives its bytes back, and until the others' last bytes are read a small body fits.
      await until('64 bodies read but their last byte', async () => bodyBytesReading() === 64 * (1024 * 1024 - 1));
      const busy = holders.find((h) => h.said().startsWith('HTTP/1.1 503'))?.said() ?? '';
      expect(busy).toMatch(/retry-after: 5/i);
      expect(busy).toContain('too many request bodies are being read at once: send it again shortly');
      // The budget is every reader's: a notification waits its turn too.
      const notification = await fetch(`${started.httpUrl}/fhir-notifications`, { method: 'POST', body: JSON.stringify({ resourceType: 'Appointment', id: 'appt-1', text: { div: 'x'.repeat(1000) } }) });
      expect([notification.status, notification.headers.get('retry-after')]).toEqual([503, '5']);
      // Those held are not refused: what is being read stays under the budget, each body under its own limit.
      expect(holders.filter((h) => h.said() === '').length).toBe(64);
      for (const { peer } of holders) peer.destroy();
      // Given back as their senders go: a body is read again.
      await until('a notification read again', async () => (await fetch(`${started.httpUrl}/fhir-notifications`, { method: 'POST', body: '{}' })).status === 400);
    } finally {
      for (const { peer } of holders) peer.destroy();
    }
  });

  it('refuses an empty notification token rather than take FHIR notifications from anyone, as serve refuses an empty DENTAL_ELIG_NOTIFICATION_TOKEN', async () => {
    for (const notificationToken of ['', '  ']) {
      const started = startHttpServer(() => undefined, { notificationToken });
      try {
        await expect(started).rejects.toThrow('notificationToken: must not be empty (leave it out to take notifications without a token)');
      } finally {
        await started.then((http) => http.close(), () => undefined);
      }
    }
  });

  it('gives a request its time to arrive whole, then answers 408 and closes, its part of the bodies being read given back', async () => {
    const started = await harness();
    const http = await startHttpServer(() => started.sync, { requestTimeoutMs: 400 });
    try {
      const peer = connect(http.port, http.host);
      await once(peer, 'connect');
      let said = '';
      peer.on('data', (chunk: Buffer) => (said += chunk.toString()));
      peer.write(`POST ${WEBHOOK_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n${'a'.repeat(10)}`);
      await once(peer, 'close');
      expect(said).toMatch(/^HTTP\/1\.1 408 /);
      // A request sent at once is not hurried.
      expect((await fetch(`http://${http.host}:${http.port}/healthz`)).status).toBe(200);
    } finally {
      await http.close();
    }
  });

  it('answers a method the webhook or the notifications do not take 405, saying in Allow which they do', async () => {
    const started = await harness();
    const asked = async (path: string, method: string) => {
      const res = await fetch(`${started.httpUrl}${path}`, { method });
      return [res.status, res.headers.get('allow')];
    };
    expect(await asked(WEBHOOK_PATH, 'GET')).toEqual([405, 'POST']);
    expect(await asked('/fhir-notifications', 'GET')).toEqual([405, 'POST, PUT']);
    expect(await asked('/fhir-notifications/Appointment/a1', 'DELETE')).toEqual([405, 'POST, PUT']);
  });

  it('censors patient data and secrets in whatever object is logged', () => {
    const lines: string[] = [];
    const log = createLogger({ destination: { write: (l: string) => lines.push(l) } as unknown as NodeJS.WritableStream });
    log.warn({ patient: { firstName: 'Ellen', lastName: 'Whitaker', birthDate: '1984-03-02', memberId: 'DD1234567' }, apiKey: 'sk_live_x', headers: { authorization: 'Bearer abc' } }, 'a careless line');
    expect(lines.join('')).not.toMatch(/Ellen|Whitaker|1984-03-02|DD1234567|sk_live_x|Bearer abc/);
    expect(lines.join('')).toContain('[redacted]');
  });

  it('censors at any depth and in arrays, and leaves errors and what is not censored as they were', () => {
    const lines: string[] = [];
    const log = createLogger({ destination: { write: (l: string) => lines.push(l) } as unknown as NodeJS.WritableStream });
    const deep = { a: { b: { c: { d: { e: [{ memberId: 'DD7654321' }, { note: 'kept' }] } } } }, secret: undefined };
    log.warn(deep, 'deep');
    log.error({ err: new Error('the store is full'), key: 'k1' }, 'failed');
    const [first, second] = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(first?.a).toEqual({ b: { c: { d: { e: [{ memberId: '[redacted]' }, { note: 'kept' }] } } } });
    // The caller's object is not changed by censoring its copy.
    expect(deep.a.b.c.d.e[0]?.memberId).toBe('DD7654321');
    expect(second).toMatchObject({ key: 'k1', err: { message: 'the store is full' } });
  });

  it('censors the fields an error carries, the errors inside it, and what a child logger is bound to', () => {
    const lines: string[] = [];
    const log = createLogger({ destination: { write: (l: string) => lines.push(l) } as unknown as NodeJS.WritableStream });
    const inner = Object.assign(new Error('the payer refused'), { subscriber: { memberId: 'DD1234567' } });
    const err = Object.assign(new Error('the check failed'), { patient: { lastName: 'Whitaker' }, apiKey: 'sk_live_x', inner });
    log.error({ err }, 'failed');
    log.error(err);
    log.child({ patient: { firstName: 'Ellen' }, token: 'tok_1' }).child({ birthDate: '1984-03-02' }).info('bound');
    expect(lines).toHaveLength(3);
    expect(lines.join('')).not.toMatch(/Ellen|Whitaker|1984-03-02|DD1234567|sk_live_x|tok_1/);
    const [first, second, third] = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    // What is not censored is kept: the error as pino writes it out, and the child's bindings.
    for (const line of [first, second]) {
      expect(line?.err).toMatchObject({ type: 'Error', message: 'the check failed', patient: { lastName: '[redacted]' }, apiKey: '[redacted]' });
      expect((line?.err as { inner?: unknown }).inner).toMatchObject({ type: 'Error', message: 'the payer refused', subscriber: { memberId: '[redacted]' } });
      expect((line?.err as { stack?: string }).stack).toContain('the check failed');
    }
    expect(third).toMatchObject({ patient: { firstName: '[redacted]' }, token: '[redacted]', birthDate: '[redacted]', msg: 'bound' });
    // The caller's error is not changed by censoring it.
    expect(err.apiKey).toBe('sk_live_x');
    expect(inner.subscriber.memberId).toBe('DD1234567');
  });

  it('censors the errors an AggregateError holds, which pino writes out as aggregateErrors', () => {
    const lines: string[] = [];
    const log = createLogger({ destination: { write: (l: string) => lines.push(l) } as unknown as NodeJS.WritableStream });
    const refused = Object.assign(new Error('the payer refused'), { subscriber: { memberId: 'DD1234567' } });
    const err = new AggregateError([refused, new Error('the chart timed out')], 'every attempt failed');
    log.error({ err }, 'failed');
    expect(lines.join('')).not.toContain('DD1234567');
    const logged = (JSON.parse(lines[0] ?? '{}') as { err?: { aggregateErrors?: unknown; stack?: string } }).err;
    expect(logged?.aggregateErrors).toMatchObject([
      { type: 'Error', message: 'the payer refused', subscriber: { memberId: '[redacted]' } },
      { type: 'Error', message: 'the chart timed out' },
    ]);
    expect(logged?.stack).toContain('every attempt failed');
    // The caller's error is not changed by censoring it.
    expect(refused.subscriber.memberId).toBe('DD1234567');
    expect(err.errors[0]).toBe(refused);
  });

  it('censors a frozen error as any other, rather than throwing out of the log call', () => {
    const lines: string[] = [];
    const log = createLogger({ destination: { write: (l: string) => lines.push(l) } as unknown as NodeJS.WritableStream });
    const err = Object.freeze(Object.assign(new Error('the check failed'), { patient: { lastName: 'Whitaker' } }));
    expect(() => log.error({ err }, 'failed')).not.toThrow();
    expect(lines.join('')).not.toContain('Whitaker');
    const logged = (JSON.parse(lines[0] ?? '{}') as { err?: { patient?: unknown; stack?: string } }).err;
    expect([logged?.patient, logged?.stack?.split('\n')[0]]).toEqual([{ lastName: '[redacted]' }, 'Error: the check failed']);
  });
});
