import type { ServerResponse } from 'node:http';
import { startScriptedServer, type RecordedRequest } from '../support/http-server';
import type { CoverageEligibilityRequest, CoverageEligibilityResponse, FhirResource } from 'fhir/r4';
import { frame } from '../../src/service/mllp-framing';
import { MllpListener } from '../../src/service/mllp-listener';
import { retryCheck } from '../../src/sync/operations';
import { segment } from '../adapters/hl7/segment';
import { client } from '../service/mllp-client';
import { gate } from '../support/gate';
import { switchableProxy } from '../support/switchable-proxy';
import { chartOf, searchFhir, startHarness, until, type Harness } from './harness';

const booking = (id: string, patient: string, payerId: string, payerName: string) =>
  [
    `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20261123090000||SIU^S12^SIU_S12|${id}|P|2.5.1`,
    `SCH|APT-${id}^SC||||||||||^^^20261210093000`,
    `PID|1||${patient}^^^SC^MR||DOE^JANE||19800102|F`,
    segment('IN1', { 1: '1', 3: payerId, 4: payerName, 17: 'SEL', 36: 'SBX-COMPLETE' }),
  ].join('\r');

/** Answers a FHIR JSON body; true, as answered. */
function fhirJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): true {
  res.writeHead(status, { 'content-type': 'application/fhir+json', ...headers }).end(JSON.stringify(body));
  return true;
}

describe('the chart down and back, a payer nobody knows, and the poll trigger', () => {
  let h: Harness;
  afterEach(async () => h.close());

  /** Starts h with the sync reaching the FHIR server only through a proxy that can be taken down. */
  async function behindProxy(): Promise<Awaited<ReturnType<typeof switchableProxy>>> {
    let proxy: Awaited<ReturnType<typeof switchableProxy>> | undefined;
    h = await startHarness({
      fhirVia: async (url) => {
        proxy = await switchableProxy(Number(new URL(url).port));
        return url.replace(`:${new URL(url).port}/`, `:${proxy.port}/`);
      },
    });
    if (!proxy) throw new Error('no proxy');
    return proxy;
  }

  /**
   * A server in front of the FHIR server that passes each request on (bodies too: the write-back
   * goes this way) once `hold` lets it, but for those `answer` answers itself (given the base the
   * sync reads, for links of its own).
   */
  async function inFrontOfFhir(hold: (req: RecordedRequest) => Promise<void>, answer: (req: RecordedRequest, res: ServerResponse, base: string) => boolean = () => false) {
    let fhirUrl = '';
    const server: Awaited<ReturnType<typeof startScriptedServer>> = await startScriptedServer(async (req, res) => {
      await hold(req);
      if (answer(req, res, `${server.url}/fhir`)) return;
      const headers = { accept: 'application/fhir+json', 'content-type': req.headers['content-type'] ?? 'application/fhir+json' };
      const upstream = await fetch(`${fhirUrl}${req.url.replace(/^\/fhir/, '')}`, { method: req.method, headers, body: req.method === 'GET' ? undefined : req.body });
      // The chart's links (a search's next page) as they would be, the chart's own: through here.
      res.writeHead(upstream.status, { 'content-type': 'application/fhir+json' }).end((await upstream.text()).replaceAll(fhirUrl, `${server.url}/fhir`));
    });
    return { ...server, via: async (url: string) => ((fhirUrl = url), `${server.url}/fhir`) };
  }

  /** A notification posted to h: the status it is answered and the first issue's diagnostics. */
  async function notify(path: string, body?: unknown): Promise<[number, string | undefined]> {
    const res = await fetch(`${h.httpUrl}/fhir-notifications${path}`, { method: 'POST', headers: { 'content-type': 'application/fhir+json' }, ...(body !== undefined && { body: JSON.stringify(body) }) });
    return [res.status, ((await res.json()) as { issue: { diagnostics: string }[] }).issue[0]?.diagnostics];
  }

  /** An id-only history Bundle naming these appointments of the chart at `chartUrl`. */
  const appointmentsChanged = (chartUrl: string, ids: string[]) => ({ resourceType: 'Bundle', type: 'history', entry: ids.map((id) => ({ fullUrl: `${chartUrl}/fhir/Appointment/${id}` })) });

  it('keeps results in the store while the FHIR server is down and writes each once when it is back', async () => {
    // The FHIR server stays up; the sync reaches it only through the proxy.
    const proxy = await behindProxy();
    const listener = new MllpListener({ handler: (m) => h.sync.receiveHl7(m) });
    const { port } = await listener.start();
    proxy.down = true;
    const c = await client(port);
    c.socket.write(frame(booking('D1', 'P-D1', '64246', 'Guardian')));
    c.socket.write(frame(booking('D2', 'P-D2', '62308', 'Cigna Dental')));
    await c.waitFor(2);
    c.socket.end();
    await until('both results stored and failing to write', async () => {
      const rows = await h.store.listChecks({ states: ['result-stored'] });
      return rows.length === 2 && rows.every((r) => r.attempts > 0 && /chart write failed/.test(r.lastError ?? ''));
    });
    expect(await searchFhir(h.fhir, 'CoverageEligibilityResponse')).toHaveLength(0);
    // The warning says why, as the check's last error does: an operator reading the log tells a chart down from one busy.
    const failures = h.logs.filter((l) => l.includes('chart write failed; will retry'));
    expect(failures.every((l) => /"err":"write eligibility: the FHIR server /.test(l))).toBe(true);
    // The first failure is a warning; the others (two checks, each failing at least once) are at debug until a write succeeds.
    expect(failures.length).toBeGreaterThanOrEqual(2);
    expect(failures.filter((l) => l.includes('"level":40'))).toHaveLength(1);

    proxy.down = false;
    await until('both written once the chart is back', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    expect(h.logs.filter((l) => l.includes('the chart takes writes again'))).toHaveLength(1);
    expect(await searchFhir(h.fhir, 'CoverageEligibilityResponse')).toHaveLength(2);
    await listener.stop();
    await proxy.close();
  });

  it('says in /healthz that a chart slow to answer is slow, 200, for a restart would not make it faster, and one answering 5xx or gone unreachable, 503, logging each 503 spell once', async () => {
    let chart: 'answering' | 'slow' | 'failing' = 'answering';
    const held = gate();
    const front = await inFrontOfFhir(
      async (req) => {
        // A chart under a morning's load: it took the connection, its answer comes after the probe's time.
        if (chart === 'slow' && req.url.endsWith('/metadata')) await held.opened;
      },
      (req, res) => chart === 'failing' && req.url.endsWith('/metadata') && fhirJson(res, 503, { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'transient' }] }),
    );
    try {
      h = await startHarness({ fhirVia: front.via });
      const health = async () => {
        const res = await fetch(`${h.httpUrl}/healthz`);
        return [res.status, (await res.json()) as { ok: boolean; fhir: string }] as const;
      };
      expect(await health()).toEqual([200, expect.objectContaining({ ok: true, fhir: 'ok' })]);
      chart = 'slow';
      expect(await health()).toEqual([200, expect.objectContaining({ ok: true, fhir: "slow: connected, but /metadata not answered in 2 s (checks' reads and writes wait for it)" })]);
      held.open();
      chart = 'failing';
      // An orchestrator restarting serve for a 503 finds it said in the log: once, not at every probe.
      for (let probe = 0; probe < 3; probe++) expect(await health()).toEqual([503, expect.objectContaining({ ok: false, fhir: 'unreachable' })]);
      chart = 'answering';
      expect(await health()).toEqual([200, expect.objectContaining({ ok: true, fhir: 'ok' })]);
      await front.close();
      expect(await health()).toEqual([503, expect.objectContaining({ ok: false, fhir: 'unreachable' })]);
      const said = h.logs.map((line) => JSON.parse(line) as { level: number; msg: string; store?: string; fhir?: string }).filter((line) => line.msg.startsWith('health '));
      expect(said).toEqual([
        expect.objectContaining({ level: 40, store: 'ok', fhir: 'unreachable', msg: 'health failing (/healthz answers 503): the chart' }),
        expect.objectContaining({ level: 30, msg: 'health ok again (/healthz answers 200 unless stopping)' }),
        expect.objectContaining({ level: 40, store: 'ok', fhir: 'unreachable', msg: 'health failing (/healthz answers 503): the chart' }),
      ]);
    } finally {
      held.open();
      await front.close();
    }
  });

  it('logs /healthz turning in the order its probes started: one that found the chart down, answered after a later one found it back, says nothing', async () => {
    let chart: 'answering' | 'failing' = 'failing';
    const held = gate();
    let holdNext = false;
    let holding = false;
    /** The probes the chart took while it was failing, answered 503 whenever they are let go. */
    const tookFailing = new Set<RecordedRequest>();
    const front = await inFrontOfFhir(
      async (req) => {
        if (!req.url.endsWith('/metadata')) return;
        if (chart === 'failing') tookFailing.add(req);
        if (!holdNext) return;
        holdNext = false;
        holding = true;
        await held.opened;
      },
      (req, res) => tookFailing.has(req) && fhirJson(res, 503, { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'transient' }] }),
    );
    try {
      h = await startHarness({ fhirVia: front.via });
      const health = async () => (await fetch(`${h.httpUrl}/healthz`)).status;
      expect(await health()).toBe(503);
      // A probe the chart takes while failing and answers late (a balancer's, held), and an orchestrator's after the chart is back.
      holdNext = true;
      const early = health();
      await until('the early probe taken by the failing chart', async () => holding);
      chart = 'answering';
      expect(await health()).toBe(200);
      held.open();
      await early;
      expect(await health()).toBe(200);
      const said = h.logs.map((line) => JSON.parse(line) as { level: number; msg: string }).filter((line) => line.msg.startsWith('health '));
      expect(said).toEqual([
        expect.objectContaining({ level: 40, msg: 'health failing (/healthz answers 503): the chart' }),
        expect.objectContaining({ level: 30, msg: 'health ok again (/healthz answers 200 unless stopping)' }),
      ]);
    } finally {
      held.open();
      await front.close();
    }
  });

  it('says in /healthz that a chart whose connections are taken and closed unanswered (a TCP balancer in front of a dead chart) is unreachable, 503, not slow', async () => {
    const proxy = await behindProxy();
    const health = async () => {
      const res = await fetch(`${h.httpUrl}/healthz`);
      return [res.status, (await res.json()) as { ok: boolean; fhir: string }] as const;
    };
    expect(await health()).toEqual([200, expect.objectContaining({ ok: true, fhir: 'ok' })]);
    proxy.down = true;
    expect(await health()).toEqual([503, expect.objectContaining({ ok: false, fhir: 'unreachable' })]);
    proxy.down = false;
    expect(await health()).toEqual([200, expect.objectContaining({ ok: true, fhir: 'ok' })]);
    await proxy.close();
  });

  it('says in /healthz that the chart refuses the plugin\'s writes (401), though its /metadata answers, until it takes one again', async () => {
    let refusing = true;
    const chart = await inFrontOfFhir(async () => undefined, (req, res) => refusing && req.method !== 'GET' && fhirJson(res, 401, { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'login' }] }));
    try {
      h = await startHarness({ fhirVia: chart.via });
      const health = async () => {
        const res = await fetch(`${h.httpUrl}/healthz`);
        return [res.status, ((await res.json()) as { fhir: string }).fhir] as const;
      };
      expect(await health()).toEqual([200, 'ok']);
      const listener = new MllpListener({ handler: (m) => h.sync.receiveHl7(m) });
      const { port } = await listener.start();
      const c = await client(port);
      c.socket.write(frame(booking('R1', 'P-R1', '64246', 'Guardian')));
      await c.waitFor(1);
      c.socket.end();
      await listener.stop();
      const [refused] = await until('the write refused', async () => {
        const rows = await h.store.listChecks({ states: ['needs-attention'] });
        return rows.length === 1 && rows;
      });
      const [status, said] = await health();
      expect(status).toBe(200);
      expect(said).toMatch(/^refusing this plugin's writes \(401: its token\) since \d{4}-\d\d-\d\dT[^ ]+: checks wait for a person \(jobs retry once it takes them\)$/);

      refusing = false;
      await retryCheck(h.store, refused?.key ?? '', new Date());
      await until('written once the chart takes it', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
      expect(await health()).toEqual([200, 'ok']);
    } finally {
      await chart.close();
    }
  });

  it('keeps a notification it cannot handle while the FHIR server is unreachable, answering 500 so the sender tries again', async () => {
    const proxy = await behindProxy();
    proxy.down = true;
    const body = JSON.stringify({ resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: `${h.fhir.url}/Appointment/appt-4004` }] });
    const res = await fetch(`${h.httpUrl}/fhir-notifications`, { method: 'POST', headers: { 'content-type': 'application/fhir+json' }, body });
    expect(res.status).toBe(500);
    const kept = await h.store.listMessages({ kind: 'fhir-notification' });
    expect(kept.map((m) => m.raw)).toEqual([body]);
    expect(kept[0]?.detail).toMatch(/send it again/);
    // Why, in the writer's words: 'fetch failed' named neither the chart nor what became of the read.
    expect(kept[0]?.detail).toMatch(/^not handled \(Appointment: the FHIR server could not be reached for the read/);
    expect(h.logs.find((l) => l.includes('FHIR notification not handled'))).toMatch(/"err":"Appointment: the FHIR server could not be reached for the read/);
    await proxy.close();
  });

  it('keeps a notification the sender sends again while the FHIR server is unreachable as one dead letter and one error line, not one a try, and lets go of it once a try is handled', async () => {
    const proxy = await behindProxy();
    try {
      await h.fhir.seed(chartOf('primary-secondary'));
      proxy.down = true;
      const send = async () => (await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' })).status;
      expect([await send(), await send(), await send()]).toEqual([500, 500, 500]);
      const [letter, ...more] = await h.store.listMessages({ status: 'dead' });
      expect(more).toHaveLength(0);
      expect(letter?.detail).toMatch(/send it again$/);
      // Its body was empty: the path is what names the appointment, and a person reading the letter needs it.
      expect(letter?.raw).toBe(JSON.stringify({ path: '/fhir-notifications/Appointment/appt-4004' }));
      expect(h.logs.filter((l) => l.includes('FHIR notification not handled'))).toHaveLength(1);
      // Counted once among the messages, as every dead letter kept is.
      expect(await (await fetch(`${h.httpUrl}/metrics`)).text()).toContain('dental_elig_messages_total{type="fhir-notification",ack="dead"} 1\n');
      proxy.down = false;
      expect(await send()).toBe(200);
      await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
      // Sent again and handled, nothing is left for a person: the letter no longer counts among the dead.
      expect(await h.store.listMessages({ status: 'dead' })).toEqual([]);
      expect((await h.store.getMessage(letter?.id ?? 0))?.detail).toMatch(/send it again; handled when sent again at \d{4}-/);
      expect(await (await fetch(`${h.httpUrl}/metrics`)).text()).toContain('dental_elig_dead_letters{kind="fhir-notification"} 0\n');
      // The chart out of reach again, the same notification's failure is news again.
      proxy.down = true;
      expect(await send()).toBe(500);
      expect((await h.store.listMessages({ status: 'dead' })).map((m) => m.id)).toEqual([letter?.id]);
      expect(h.logs.filter((l) => l.includes('FHIR notification not handled'))).toHaveLength(2);
      expect(await (await fetch(`${h.httpUrl}/metrics`)).text()).toContain('dental_elig_messages_total{type="fhir-notification",ack="dead"} 2\n');
    } finally {
      await proxy.close();
    }
  });

  it('keeps a notification naming an id R4 does not allow as one dead letter for that id however often the sender sends it again', async () => {
    const proxy = await behindProxy();
    try {
      await h.fhir.seed(chartOf('primary-secondary'));
      proxy.down = true;
      const body = JSON.stringify({ resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: `${h.fhir.url}/Appointment/appt_4004!` }, { fullUrl: `${h.fhir.url}/Appointment/appt-4004` }] });
      const send = async () => (await fetch(`${h.httpUrl}/fhir-notifications`, { method: 'POST', headers: { 'content-type': 'application/fhir+json' }, body })).status;
      expect([await send(), await send(), await send()]).toEqual([500, 500, 500]);
      proxy.down = false;
      expect(await send()).toBe(422);
      // Kept before the reads, the id's letter was kept again at each try: three of them. The tries answered 500
      // were kept as one letter, moot once the last try was handled (the good appointment read, the bad id's letter kept).
      const dead = await h.store.listMessages({ status: 'dead' });
      expect(dead.map((m) => m.detail)).toEqual([expect.stringMatching(/^Appointment\.id is not an R4 id/)]);
      expect((await h.store.listMessages({ kind: 'fhir-notification' })).map((m) => m.detail)).toContainEqual(expect.stringMatching(/send it again; handled when sent again at /));
    } finally {
      await proxy.close();
    }
  });

  it('keeps a notification the chart answers as it will again as a dead letter naming what was refused, answered 422 so it is not sent again, the appointment beside it handled', async () => {
    // A chart that redirects one appointment's read, and pages its patient's Coverages to another origin, then in a circle.
    let coverages: 'whole' | 'elsewhere' | 'circle' = 'whole';
    const chart = await inFrontOfFhir(async () => undefined, (req, res, base) => {
      if (req.url === '/fhir/Appointment/appt-moved') return fhirJson(res, 307, {}, { location: 'https://chart.example.test/fhir/Appointment/appt-moved' });
      if (!req.url.startsWith('/fhir/Coverage?') || coverages === 'whole') return false;
      const next = `${coverages === 'elsewhere' ? 'https://chart.example.test/fhir' : base}/Coverage?patient=Patient/pat-marco&page=2`;
      return fhirJson(res, 200, { resourceType: 'Bundle', type: 'searchset', link: [{ relation: 'next', url: next }] });
    });
    try {
      h = await startHarness({ fhirVia: chart.via });
      await h.fhir.seed(chartOf('primary-secondary'));
      const redirected = 'Appointment/appt-moved: Appointment: the FHIR server answered 307 to the read, a redirect, not followed: set the FHIR URL to where the chart answers';
      expect(await notify('', appointmentsChanged(chart.url, ['appt-moved', 'appt-4004']))).toEqual([422, `${redirected}; Appointment/appt-4004: booked`]);
      expect((await h.store.listAppointments('booked')).map((a) => a.key)).toEqual(['fhir|Appointment/appt-4004']);
      // A Coverage changed: the patient's appointment is read again, and its Coverage search pages away.
      coverages = 'elsewhere';
      const leaves = "Coverage/cov-marco-aetna: Coverage: the FHIR server's search gave a next link leaving it for https://chart.example.test; not followed, it would carry the chart's access token there";
      expect(await notify('/Coverage/cov-marco-aetna')).toEqual([422, leaves]);
      coverages = 'circle';
      const circles = "Appointment/appt-4004: Coverage: the FHIR server's search gave a next link it had given before, after 2 pages; not read in part";
      expect(await notify('/Appointment/appt-4004')).toEqual([422, circles]);
      const dead = await h.store.listMessages({ status: 'dead' });
      expect(dead.map((m) => m.detail).sort()).toEqual([circles, leaves, redirected].sort());
      // What was searched by (the patient, in the next link's query) is in none of them, nor in the log.
      expect(JSON.stringify([dead.map((m) => m.detail), h.logs])).not.toMatch(/pat-marco|page=2/);
      expect(h.logs.join('\n')).not.toMatch(/FHIR notification not handled/);
    } finally {
      await chart.close();
    }
  });

  it('keeps a notification naming what the chart refuses (400, 401, 403) as a dead letter naming the status, answered 422, the appointment beside it handled; throttled (429), it is answered 500, send it again', async () => {
    const outcome = (code: string) => ({ resourceType: 'OperationOutcome', issue: [{ severity: 'error', code, diagnostics: 'no access to Patient/pat-marco' }] });
    let coverageSearch: number | undefined;
    const chart = await inFrontOfFhir(async () => undefined, (req, res) => {
      if (req.url === '/fhir/Appointment/appt-locked') return fhirJson(res, 403, outcome('forbidden'));
      if (req.url === '/fhir/Coverage/cov-marco-aetna') return fhirJson(res, 401, outcome('login'));
      return coverageSearch !== undefined && req.url.startsWith('/fhir/Coverage?') && fhirJson(res, coverageSearch, outcome(coverageSearch === 429 ? 'throttled' : 'not-supported'));
    });
    try {
      h = await startHarness({ fhirVia: chart.via });
      await h.fhir.seed(chartOf('primary-secondary'));
      const forbidden = 'Appointment/appt-locked: Appointment: the FHIR server answered 403 to the read: request (forbidden)';
      expect(await notify('', appointmentsChanged(chart.url, ['appt-locked', 'appt-4004']))).toEqual([422, `${forbidden}; Appointment/appt-4004: booked`]);
      expect((await h.store.listAppointments('booked')).map((a) => a.key)).toEqual(['fhir|Appointment/appt-4004']);
      const login = 'Coverage/cov-marco-aetna: Coverage: the FHIR server answered 401 to the read: request (login)';
      expect(await notify('/Coverage/cov-marco-aetna')).toEqual([422, login]);
      coverageSearch = 400;
      const unsupported = 'Appointment/appt-4004: Coverage: the FHIR server answered 400 to the search: request (not-supported)';
      expect(await notify('/Appointment/appt-4004')).toEqual([422, unsupported]);
      const dead = await h.store.listMessages({ status: 'dead' });
      expect(dead.map((m) => m.detail).sort()).toEqual([forbidden, login, unsupported].sort());
      // Throttled, the chart may answer later: the sender is asked to send it again.
      coverageSearch = 429;
      expect(await notify('/Appointment/appt-4004')).toEqual([500, 'the notification could not be handled now; send it again']);
      // What was searched by, and the chart's diagnostics, are in no dead letter nor the log.
      expect(JSON.stringify([(await h.store.listMessages({ status: 'dead' })).map((m) => m.detail), h.logs])).not.toMatch(/pat-marco/);
    } finally {
      await chart.close();
    }
  });

  it('writes an error the front desk can act on for a payer the catalog does not know, and waits in needs-attention', async () => {
    h = await startHarness();
    const listener = new MllpListener({ handler: (m) => h.sync.receiveHl7(m) });
    const { port } = await listener.start();
    const c = await client(port);
    c.socket.write(frame(booking('U1', 'P-U1', 'ZZ999', 'Acme Mutual Dental')));
    expect((await c.waitFor(1))[0]).toContain('MSA|AA|U1');
    c.socket.end();
    const row = await until('needs attention', async () => (await h.store.listChecks({ states: ['needs-attention'] }))[0]);
    expect(row.lastError).toMatch(/^PayerNotResolved: .*correct the payer/);
    const [response] = (await searchFhir(h.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    expect(response?.outcome).toBe('error');
    expect(JSON.stringify(response?.error)).toContain('PayerNotResolved');
    expect(h.sandbox.requestLog.some((r) => r.method === 'POST' && r.path.includes('insurance-verification'))).toBe(false);
    await listener.stop();
  });

  it('finds booked appointments by polling the FHIR server, once each', async () => {
    h = await startHarness({ now: () => new Date('2026-11-23T12:00:00Z') });
    await h.fhir.seed(chartOf('primary-secondary'));
    expect(await h.sync.pollAppointments()).toBe(1);
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    // The next poll sees nothing changed since the last.
    expect(await h.sync.pollAppointments()).toBe(0);
    expect(await searchFhir(h.fhir, 'CoverageEligibilityResponse')).toHaveLength(2);
  });

  it('sees by polling an appointment cancelled since the last poll, and verifies it no more', async () => {
    h = await startHarness({ now: () => new Date('2026-11-23T12:00:00Z') });
    await h.fhir.seed(chartOf('primary-secondary'));
    expect(await h.sync.pollAppointments()).toBe(1);
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    await h.fhir.seed(chartOf('primary-secondary').flatMap((r) => (r.resourceType === 'Appointment' ? [{ ...r, status: 'cancelled' as const }] : [])));
    expect(await h.sync.pollAppointments()).toBe(1);
    expect((await h.store.listAppointments('cancelled')).map((a) => a.key)).toEqual(['fhir|Appointment/appt-4004']);
    // Their results stay in the chart; no visit is left to verify them again for.
    expect((await h.store.listChecks()).map((c) => c.dueAt)).toEqual([undefined, undefined]);
  });

  it('finds by polling a pending appointment as a booked one, and passes over a waitlisted one', async () => {
    h = await startHarness({ now: () => new Date('2026-11-23T12:00:00Z') });
    const withStatus = (status: 'pending' | 'waitlist') => chartOf('primary-secondary').map((r) => (r.resourceType === 'Appointment' ? { ...r, status } : r));
    await h.fhir.seed(withStatus('waitlist'));
    expect(await h.sync.pollAppointments()).toBe(0);
    await h.fhir.seed(withStatus('pending'));
    expect(await h.sync.pollAppointments()).toBe(1);
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    expect((await h.store.listAppointments()).map((a) => [a.key, a.status])).toEqual([['fhir|Appointment/appt-4004', 'booked']]);
  });

  it('stops waiting for insurance for an appointment that turns proposed or waitlisted, and takes it as new when booked again', async () => {
    h = await startHarness({ now: () => new Date('2026-11-23T12:00:00Z') });
    const chart = chartOf('primary-secondary');
    const appointment = (status: 'booked' | 'proposed' | 'waitlist') => chart.flatMap((r) => (r.resourceType === 'Appointment' ? [{ ...r, status }] : []));
    await h.fhir.seed(chart.filter((r) => r.resourceType !== 'Coverage'));
    expect(await h.sync.pollAppointments()).toBe(1);
    expect((await h.store.listAppointments()).map((a) => a.status)).toEqual(['awaiting-insurance']);
    // Waiting, it is read by every poll.
    expect(await h.sync.pollAppointments()).toBe(1);
    for (const status of ['proposed', 'waitlist'] as const) {
      await h.fhir.seed(appointment(status));
      expect(await h.sync.pollAppointments()).toBe(1);
      expect(await h.store.listAppointments('awaiting-insurance')).toEqual([]);
      expect((await h.store.listMessages({ kind: 'fhir-notification' }))[0]?.detail).toMatch(new RegExp(`^not-verified: status ${status} .*; no longer awaiting insurance$`));
      expect(await h.sync.pollAppointments()).toBe(0);
      await h.fhir.seed(appointment('booked'));
      expect(await h.sync.pollAppointments()).toBe(1);
      expect((await h.store.listAppointments()).map((a) => a.status)).toEqual(['awaiting-insurance']);
    }
    await h.fhir.seed(chart.filter((r) => r.resourceType === 'Coverage'));
    expect(await h.sync.pollAppointments()).toBe(1);
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
  });

  it('stops polling when stopped, waiting for the poll under way, and starts no other', async () => {
    // Each Appointment search takes 300 ms.
    const slow = await inFrontOfFhir(async (req) => {
      if (req.url.includes('/Appointment')) await new Promise((r) => setTimeout(r, 300));
    });
    h = await startHarness({ settings: { fhirPollIntervalMs: 20 }, fhirVia: slow.via });
    const searches = () => slow.requests.filter((r) => r.url.includes('/Appointment')).length;
    await until('a poll under way', async () => searches() > 0);
    await h.sync.stop();
    const after = searches();
    await new Promise((r) => setTimeout(r, 400));
    expect(searches()).toBe(after);
    expect(h.logs.join('\n')).not.toMatch(/FHIR poll failed/);
    await slow.close();
  });

  it('answers a heartbeat at once and polls after, one poll at a time, however long the FHIR server takes', async () => {
    let open: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (open = resolve));
    // Appointment searches wait until the test opens the gate.
    const slow = await inFrontOfFhir(async (req) => {
      if (req.url.includes('/Appointment?')) await gate;
    });
    try {
      h = await startHarness({ now: () => new Date('2026-11-23T12:00:00Z'), fhirVia: slow.via });
      await h.fhir.seed(chartOf('primary-secondary'));
      const searches = () => slow.requests.filter((r) => r.url.includes('/Appointment?')).length;
      const heartbeat = async () => {
        const res = await fetch(`${h.httpUrl}/fhir-notifications`, { method: 'POST', signal: AbortSignal.timeout(5000) });
        return [res.status, ((await res.json()) as { issue: { diagnostics: string }[] }).issue[0]?.diagnostics];
      };
      expect(await heartbeat()).toEqual([200, 'heartbeat: polling the FHIR server for what changed']);
      await until('the poll reading', async () => searches() === 1);
      // Another heartbeat while that poll is still reading: answered, and no second poll.
      expect(await heartbeat()).toEqual([200, 'heartbeat: a poll is already under way']);
      expect(await h.store.listAppointments()).toEqual([]);
      open();
      await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
      expect(searches()).toBe(1);
    } finally {
      open();
      await slow.close();
    }
  });

  it('answers a heartbeat though the poll it starts fails, and logs the failure without patient data', async () => {
    const proxy = await behindProxy();
    await h.fhir.seed(chartOf('primary-secondary'));
    proxy.down = true;
    const res = await fetch(`${h.httpUrl}/fhir-notifications`, { method: 'POST' });
    expect(res.status).toBe(200);
    const failed = await until('the failure logged', async () => h.logs.find((line) => line.includes('FHIR poll failed')));
    expect(failed).not.toMatch(/Alvarez|Marco|1985-11-30/);
    await proxy.close();
  });

  it('polls appointments still on a chart that refuses to search Coverages and Patients by _lastUpdated alone, and warns of what it could not read once', async () => {
    // As charts whose Coverage search needs a patient answer it.
    const changeSearch = /\/(Coverage|Patient)\?(.*&)?_lastUpdated=/;
    let refuses = true;
    const outcome = { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'not-supported', diagnostics: 'a search by patient is required' }] };
    const refusing = await inFrontOfFhir(async () => undefined, (req, res) => refuses && changeSearch.test(req.url) && fhirJson(res, 400, outcome));
    try {
      h = await startHarness({ now: () => new Date('2026-11-23T12:00:00Z'), fhirVia: refusing.via });
      await h.fhir.seed(chartOf('primary-secondary'));
      expect(await h.sync.pollAppointments()).toBe(1);
      await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
      expect(await h.sync.pollAppointments()).toBe(0);
      const said = (message: string, level: number) =>
        h.logs
          .map((line) => JSON.parse(line) as { resourceType?: string; level: number; msg: string })
          .filter((line) => line.msg.startsWith(message) && line.level === level)
          .map((line) => line.resourceType)
          .sort();
      // Warned once per type; the second poll's refusals are debug lines.
      expect(said('FHIR poll could not search', 40)).toEqual(['Coverage', 'Patient']);
      expect(said('FHIR poll could not search', 20)).toEqual(['Coverage', 'Patient']);
      expect(refusing.requests.filter((r) => changeSearch.test(r.url))).toHaveLength(4);
      refuses = false;
      // Answered, the searches read what changed since the mark they kept: the seeded patient's appointment.
      expect(await h.sync.pollAppointments()).toBe(1);
      expect(said('FHIR poll searches what changed of this type again', 30)).toEqual(['Coverage', 'Patient']);
    } finally {
      await refusing.close();
    }
  });

  it('reads a changed patient\'s own appointments on a chart that refuses or fails a search of Coverages by subscriber, and no other patient\'s, nor every page, on one that ignores it', async () => {
    const bySubscriber = /\/Coverage\?(.*&)?subscriber=/;
    let chart: 'refuses' | 'fails' | 'ignores' = 'refuses';
    const outcome = { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'not-supported', diagnostics: 'unknown search parameter: subscriber' }] };
    const answering = await inFrontOfFhir(async (req) => {
      // A chart that does not know the parameter and ignores it, as R4 lets it: every Coverage, a page each here.
      if (chart === 'ignores' && bySubscriber.test(req.url)) req.url = '/fhir/Coverage?_count=1';
    }, (req, res) => chart !== 'ignores' && bySubscriber.test(req.url) && fhirJson(res, chart === 'refuses' ? 400 : 500, outcome));
    try {
      h = await startHarness({ now: () => new Date('2026-11-23T12:00:00Z'), fhirVia: answering.via });
      const seeded = chartOf('primary-secondary');
      // Lucia's appointment verifies a Coverage of her own, Marco not its subscriber.
      const lucia = [
        { resourceType: 'Patient', id: 'pat-lucia', name: [{ family: 'Alvarez', given: ['Lucia'] }], gender: 'female', birthDate: '2015-06-01' },
        { resourceType: 'Coverage', id: 'cov-lucia', status: 'active', subscriberId: 'L1', beneficiary: { reference: 'Patient/pat-lucia' }, payor: [{ reference: 'Organization/org-delta-ca' }] },
        ...seeded.flatMap((r) => (r.resourceType === 'Appointment' ? [{ ...r, id: 'appt-5005', participant: [{ actor: { reference: 'Patient/pat-lucia' } }] }] : [])),
      ] as FhirResource[];
      await h.fhir.seed([...seeded, ...lucia]);
      expect(await notify('/Appointment/appt-4004')).toEqual([200, 'Appointment/appt-4004: booked']);
      expect(await notify('/Appointment/appt-5005')).toEqual([200, 'Appointment/appt-5005: booked']);
      expect(await notify('/Patient/pat-marco')).toEqual([200, 'Patient/pat-marco: Appointment/appt-4004: booked']);
      chart = 'fails';
      expect(await notify('/Patient/pat-marco')).toEqual([200, 'Patient/pat-marco: Appointment/appt-4004: booked']);
      chart = 'ignores';
      const before = answering.requests.length;
      expect(await notify('/Patient/pat-marco')).toEqual([200, 'Patient/pat-marco: Appointment/appt-4004: booked']);
      // Three Coverages, a page each: the search gives up at its second page rather than read the chart's every one.
      expect(answering.requests.slice(before).filter((r) => r.url.startsWith('/fhir/Coverage') && !/[?&](patient|beneficiary)=/.test(r.url))).toHaveLength(2);
    } finally {
      await answering.close();
    }
  });

  it('keeps an appointment cancelled when a read of it begun before the cancellation ends after it, and verifies nothing for it', async () => {
    // The first notification's read is held at the Coverage search while the chart cancels the appointment and says so.
    const held = gate();
    let holding = true;
    const reached = gate();
    const chart = await inFrontOfFhir(async (req) => {
      if (!holding || !req.url.startsWith('/fhir/Coverage?')) return;
      holding = false;
      reached.open();
      await held.opened;
    });
    try {
      h = await startHarness({ now: () => new Date('2026-11-23T12:00:00Z'), fhirVia: chart.via });
      const seeded = chartOf('primary-secondary');
      await h.fhir.seed(seeded);
      const booked = notify('/Appointment/appt-4004');
      await reached.opened;
      await h.fhir.seed(seeded.flatMap((r) => (r.resourceType === 'Appointment' ? [{ ...r, status: 'cancelled' }] : [])));
      expect(await notify('/Appointment/appt-4004')).toEqual([200, 'Appointment/appt-4004: cancelled']);
      held.open();
      // Read again, once the other read was stored: the appointment as the chart has it now.
      expect(await booked).toEqual([200, 'Appointment/appt-4004: cancelled']);
      expect((await h.store.listAppointments()).map((a) => [a.key, a.status, a.checkKeys])).toEqual([['fhir|Appointment/appt-4004', 'cancelled', []]]);
      expect(h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification'))).toHaveLength(0);
    } finally {
      held.open();
      await chart.close();
    }
  });

  it('writes again for the Coverage the chart made a result whose write was under way as the chart deleted its Coverage and made it again', async () => {
    // The first write of Delta's result is held at the chart while the EHR deletes its Coverage and makes it again under a new id.
    const held = gate();
    const reached = gate();
    let holding = true;
    const chart = await inFrontOfFhir(async (req) => {
      if (!holding || req.method !== 'POST' || !req.body.includes('"type":"transaction"') || !req.body.includes('Coverage/cov-marco-delta"')) return;
      holding = false;
      reached.open();
      await held.opened;
    });
    try {
      h = await startHarness({ fhirVia: chart.via });
      const seeded = chartOf('primary-secondary');
      await h.fhir.seed(seeded);
      expect(await notify('/Appointment/appt-4004')).toEqual([200, 'Appointment/appt-4004: booked']);
      await reached.opened;
      await h.fhir.repo.deleteResource('Coverage', 'cov-marco-delta');
      await h.fhir.seed(seeded.flatMap((r) => (r.resourceType === 'Coverage' && r.id === 'cov-marco-delta' ? [{ ...r, id: 'cov-marco-delta-2' }] : [])));
      expect(await notify('/Appointment/appt-4004')).toEqual([200, 'Appointment/appt-4004: booked']);
      held.open();
      const named = async () => ((await searchFhir(h.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[]).map((r) => r.insurance?.[0]?.coverage.reference).sort();
      await until('the pair names the Coverage made', async () => (await named()).includes('Coverage/cov-marco-delta-2') && (await h.store.listChecks({ states: ['written'] })).length === 2);
      // The pair the held write made, written again in place: none left naming the Coverage deleted.
      expect(await named()).toEqual(['Coverage/cov-marco-aetna', 'Coverage/cov-marco-delta-2']);
      const requests = (await searchFhir(h.fhir, 'CoverageEligibilityRequest')) as CoverageEligibilityRequest[];
      expect(requests.map((r) => r.insurance?.[0]?.coverage.reference).sort()).toEqual(['Coverage/cov-marco-aetna', 'Coverage/cov-marco-delta-2']);
      expect(h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification'))).toHaveLength(2);
    } finally {
      held.open();
      await chart.close();
    }
  });

  it('polls on past an appointment whose read the chart redirects, keeping it once as a dead letter, not failing every poll on it', async () => {
    const chart = await inFrontOfFhir(async () => undefined, (req, res) => req.url === '/fhir/Appointment/appt-moved' && fhirJson(res, 307, {}, { location: 'https://chart.example.test/fhir/Appointment/appt-moved' }));
    try {
      h = await startHarness({ now: () => new Date('2026-11-23T12:00:00Z'), fhirVia: chart.via });
      const seeded = chartOf('primary-secondary');
      await h.fhir.seed([...seeded, ...seeded.flatMap((r) => (r.resourceType === 'Appointment' ? [{ ...r, id: 'appt-moved' }] : []))]);
      expect(await h.sync.pollAppointments()).toBe(2);
      expect((await h.store.listAppointments('booked')).map((a) => a.key)).toEqual(['fhir|Appointment/appt-4004']);
      // Polled past: the next poll reads neither again.
      expect(await h.sync.pollAppointments()).toBe(0);
      expect((await h.store.listMessages({ status: 'dead' })).map((m) => m.detail)).toEqual([
        'Appointment/appt-moved: Appointment: the FHIR server answered 307 to the read, a redirect, not followed: set the FHIR URL to where the chart answers',
      ]);
    } finally {
      await chart.close();
    }
  });

  it('keeps an appointment awaiting insurance that the chart refuses for good as one dead letter and one warning, not one a poll, and verifies it once the chart answers', async () => {
    let refused = false;
    const chart = await inFrontOfFhir(async () => undefined, (req, res) => refused && req.url.startsWith('/fhir/Coverage?patient=') && fhirJson(res, 403, { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'forbidden' }] }));
    try {
      h = await startHarness({ now: () => new Date('2026-11-23T12:00:00Z'), fhirVia: chart.via });
      const seeded = chartOf('primary-secondary');
      await h.fhir.seed(seeded.filter((r) => r.resourceType !== 'Coverage'));
      expect(await h.sync.pollAppointments()).toBe(1);
      expect((await h.store.listAppointments()).map((a) => a.status)).toEqual(['awaiting-insurance']);
      // The chart takes the patient's Coverages from this client; waiting, the appointment is read by every poll.
      refused = true;
      for (let poll = 0; poll < 3; poll++) expect(await h.sync.pollAppointments()).toBe(1);
      expect((await h.store.listMessages({ status: 'dead' })).map((m) => m.detail)).toEqual(['Appointment/appt-4004: Coverage: the FHIR server answered 403 to the search: request (forbidden)']);
      const warned = h.logs.map((line) => JSON.parse(line) as { level: number; msg: string; reason?: string }).filter((line) => line.level >= 40);
      // Why, without the id: a chart's ids may be made of what they are of; the letter names it.
      expect(warned.map((line) => [line.msg, line.reason])).toEqual([
        ['FHIR poll kept an appointment the chart refuses as a dead letter (jobs messages --dead); read again at each poll, it is kept once', 'Appointment/(id): Coverage: the FHIR server answered 403 to the search: request (forbidden)'],
      ]);
      // The permission given back and the insurance entered: the next poll verifies it.
      refused = false;
      await h.fhir.seed(seeded.filter((r) => r.resourceType === 'Coverage'));
      expect(await h.sync.pollAppointments()).toBe(1);
      await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
      // Read and handled, its letter is moot: handled, saying so, and no alert left firing for it.
      expect(await h.store.listMessages({ status: 'dead' })).toHaveLength(0);
      const letters = (await h.store.listMessages({ kind: 'fhir-notification' })).filter((m) => m.detail?.startsWith('Appointment/appt-4004: Coverage: '));
      expect(letters.map((m) => [m.status, m.detail?.includes('; handled when read again at 2026-11-23T12:00:00.000Z')])).toEqual([['handled', true]]);
    } finally {
      await chart.close();
    }
  });

  it('says once that the chart redirects the poll\'s search, not at every interval, and again once a poll succeeds', async () => {
    let moved = true;
    const appointments = /^\/fhir\/Appointment\?/;
    const chart = await inFrontOfFhir(async () => undefined, (req, res) => moved && appointments.test(req.url) && fhirJson(res, 302, {}, { location: 'https://chart.example.test/fhir/Appointment' }));
    try {
      h = await startHarness({ now: () => new Date('2026-11-23T12:00:00Z'), settings: { fhirPollIntervalMs: 20 }, fhirVia: chart.via });
      await h.fhir.seed(chartOf('primary-secondary'));
      await until('four polls redirected', async () => chart.requests.filter((r) => appointments.test(r.url)).length >= 4);
      const said = () => h.logs.map((line) => JSON.parse(line) as { level: number; msg: string; err?: string }).filter((line) => line.msg.startsWith('FHIR poll'));
      const warned = said().filter((line) => line.level >= 40);
      expect(warned.map((line) => [line.msg, line.err])).toEqual([
        [
          "FHIR poll refused the chart's answer, as it will at every interval: said once, and again once a poll succeeds",
          'Appointment: the FHIR server answered 302 to the search, a redirect, not followed: set the FHIR URL to where the chart answers',
        ],
      ]);
      expect(said().filter((line) => line.level === 20).length).toBeGreaterThanOrEqual(2);
      moved = false;
      await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
      expect(said().filter((line) => line.level === 30).map((line) => line.msg)).toEqual(['FHIR poll succeeds again']);
    } finally {
      await h.sync.stop();
      await chart.close();
    }
  });

  it('says once that the poll fails with the chart out of reach, not at every interval, and again once a poll succeeds', async () => {
    let down = true;
    const appointments = /^\/fhir\/Appointment\?/;
    const chart = await inFrontOfFhir(async () => undefined, (req, res) => down && appointments.test(req.url) && fhirJson(res, 503, {}));
    try {
      h = await startHarness({ now: () => new Date('2026-11-23T12:00:00Z'), settings: { fhirPollIntervalMs: 20 }, fhirVia: chart.via });
      await h.fhir.seed(chartOf('primary-secondary'));
      await until('four polls failed', async () => chart.requests.filter((r) => appointments.test(r.url)).length >= 4);
      const said = () => h.logs.map((line) => JSON.parse(line) as { level: number; msg: string }).filter((line) => line.msg.startsWith('FHIR poll'));
      expect(said().filter((line) => line.level >= 40).map((line) => line.msg)).toEqual(['FHIR poll failed; trying again at each interval or heartbeat: said once, and again once a poll succeeds']);
      expect(said().filter((line) => line.level === 20).length).toBeGreaterThanOrEqual(2);
      down = false;
      await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
      expect(said().filter((line) => line.level === 30).map((line) => line.msg)).toEqual(['FHIR poll succeeds again']);
    } finally {
      await h.sync.stop();
      await chart.close();
    }
  });

  it('finds an appointment booked beyond the poll window once the window reaches it, though it never changed', async () => {
    let clock = new Date('2026-11-01T12:00:00Z');
    h = await startHarness({ now: () => clock });
    // Booked on the first for December 7: beyond the 14 days ahead the poll looks at.
    await h.fhir.seed(chartOf('primary-secondary'));
    expect(await h.sync.pollAppointments()).toBe(0);
    clock = new Date('2026-11-20T12:00:00Z');
    expect(await h.sync.pollAppointments()).toBe(0);
    clock = new Date('2026-11-24T12:00:00Z');
    expect(await h.sync.pollAppointments()).toBe(1);
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    clock = new Date('2026-11-25T12:00:00Z');
    expect(await h.sync.pollAppointments()).toBe(0);
  });

  it('sees by polling an appointment moved beyond the poll window, and verifies nothing again for the day it left', async () => {
    let clock = new Date('2026-11-30T12:00:00Z');
    h = await startHarness({ now: () => clock, settings: { freshnessDays: 3, reverifyLeadDays: 1 } });
    const chart = chartOf('primary-secondary'); // the visit: 2026-12-07
    await h.fhir.seed(chart);
    expect(await h.sync.pollAppointments()).toBe(1);
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    const onTheSeventh = async () => (await h.store.listChecks()).filter((c) => c.check.dateOfService === '2026-12-07');
    expect((await onTheSeventh()).map((c) => c.dueAt)).toEqual(['2026-12-06T00:00:00.000Z', '2026-12-06T00:00:00.000Z']);

    // Moved to January: past the 14 days ahead the poll looks at.
    clock = new Date('2026-12-01T12:00:00Z');
    await h.fhir.seed(chart.flatMap((r) => (r.resourceType === 'Appointment' ? [{ ...r, start: '2027-01-20T11:00:00-06:00', end: '2027-01-20T12:00:00-06:00' }] : [])));
    expect(await h.sync.pollAppointments()).toBe(1);
    expect((await h.store.listAppointments()).map((a) => [a.key, a.dateOfService])).toEqual([['fhir|Appointment/appt-4004', '2027-01-20']]);
    expect((await onTheSeventh()).map((c) => [c.state, c.dueAt])).toEqual([['written', undefined], ['written', undefined]]);
    await until('the new day written', async () => (await h.store.listChecks({ states: ['written'] })).length === 4);
    const sent = h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification')).length;

    clock = new Date('2026-12-06T06:00:00Z');
    await new Promise((r) => setTimeout(r, 300));
    expect(h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification'))).toHaveLength(sent);
    expect((await onTheSeventh()).map((c) => c.round)).toEqual([0, 0]);
  });

  it('finds by polling an appointment booked on the last day the window reaches, though at its own offset it is the day after', async () => {
    let clock = new Date('2026-11-24T12:00:00Z'); // the window: to December 8
    h = await startHarness({ now: () => clock });
    const chart = chartOf('primary-secondary');
    await h.fhir.seed(chart);
    expect(await h.sync.pollAppointments()).toBe(1);
    // Booked since for 1 AM on December 9 at +13:00, December 8 at noon UTC: in the window, as the server reads a date.
    await h.fhir.seed(chart.flatMap((r) => (r.resourceType === 'Appointment' ? [{ ...r, id: 'appt-dawn', start: '2026-12-09T01:00:00+13:00', end: '2026-12-09T02:00:00+13:00' }] : [])));
    const found = await h.sync.pollAppointments();
    clock = new Date('2026-11-25T12:00:00Z');
    expect(found + (await h.sync.pollAppointments())).toBe(1);
    expect((await h.store.listAppointments()).map((a) => a.key).sort()).toEqual(['fhir|Appointment/appt-4004', 'fhir|Appointment/appt-dawn']);
  });
});
