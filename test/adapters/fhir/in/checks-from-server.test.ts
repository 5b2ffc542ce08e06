import { readFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import * as path from 'node:path';
import type { Bundle, Resource } from 'fhir/r4';
import { loadClinicRouting } from '../../../../src/adapters/clinic-routing';
import { checksFromServer, convertFromServer, type FhirReader } from '../../../../src/adapters/fhir/in';
import { fhirKitReader } from '../../../../src/sync/fhir-reader';
import { FhirInputError } from '../../../../src/adapters/fhir/operation-outcome';
import { startFhirServer, type FhirServer } from '../../../../src/sandbox/fhir-server';
import { startScriptedServer, streamLarge } from '../../../support/http-server';
import { BUNDLE_DIR, readBundle, RECEIVED_AT } from '../corpus';

/**
 * The fixture bundles' resources stored in the embedded FHIR server and read back over HTTP
 * through fhir-kit-client, given only the appointment id: the checks must be the ones the
 * bundle gives (the server holds extra resources the search must leave out).
 */
const FIXTURES = { self: 'appt-1001', child: 'appt-3003', 'primary-secondary': 'appt-4004' } as const;
type Name = keyof typeof FIXTURES;

/** One server per fixture: the fixtures share ids (Patient/pat-ellen) with different content. */
const servers = new Map<Name, FhirServer>();
const readers = new Map<Name, FhirReader>();
const options = { routing: loadClinicRouting(), receivedAt: RECEIVED_AT };

beforeAll(async () => {
  for (const name of Object.keys(FIXTURES) as Name[]) {
    const server = await startFhirServer();
    servers.set(name, server);
    // The repository keeps a given id, so the fixtures' references hold.
    await server.seed(((readBundle(name) as Bundle).entry ?? []).flatMap((e) => (e.resource ? [e.resource] : [])));
    readers.set(name, await fhirKitReader(server.url));
  }
});

afterAll(async () => {
  for (const server of servers.values()) await server.close();
});

const serverOf = (name: Name) => servers.get(name) as FhirServer;
const readerOf = (name: Name) => readers.get(name) as FhirReader;

const expected = (name: string) => JSON.parse(readFileSync(path.join(BUNDLE_DIR, `${name}.expected.json`), 'utf8')) as unknown;
/** What the reader refuses for good, a FhirInputError: the same request gets the same answer. */
const refusal = (message: string) => ({ name: 'FhirInputError', message });

describe('checksFromServer over fhir-kit-client', () => {
  it.each(Object.entries(FIXTURES) as Array<[Name, string]>)('%s: the appointment read from the server gives the checks its bundle gives', async (name, appointmentId) => {
    expect(await checksFromServer(readerOf(name), appointmentId, options)).toEqual(expected(name));
  });

  it('names an appointment the server does not have', async () => {
    await expect(checksFromServer(readerOf('self'), 'appt-missing', options)).rejects.toBeInstanceOf(FhirInputError);
    await expect(checksFromServer(readerOf('self'), 'appt-missing', options)).rejects.toThrow('Appointment: the server has no Appointment with id appt-missing');
  });

  /** One more active coverage of Ellen's, second in order, on the self server; each test deletes its own. */
  const seedCoverage = (id: string, fields: { subscriberId: string; payor: Array<{ reference: string }>; period?: { end: string } }) =>
    serverOf('self').seed([{ resourceType: 'Coverage', id, status: 'active', beneficiary: { reference: 'Patient/pat-ellen' }, order: 2, ...fields }]);

  it('reports a payor the server does not hold by its element', async () => {
    const server = serverOf('self');
    await seedCoverage('cov-ellen-dangling', { subscriberId: 'X1', payor: [{ reference: 'Organization/org-gone' }] });
    await expect(checksFromServer(readerOf('self'), 'appt-1001', options)).rejects.toThrow(
      'Coverage[1].payor[0]: references Organization/org-gone, which the bundle does not hold',
    );
    await server.repo.deleteResource('Coverage', 'cov-ellen-dangling');
  });

  it('gives the notes a Bundle would: an active coverage that ended makes no check and a warning naming its period', async () => {
    const server = serverOf('self');
    await seedCoverage('cov-ellen-ended', { subscriberId: 'X2', payor: [{ reference: 'Organization/org-delta-ca' }], period: { end: '2026-06-30' } });
    const { checks, notes } = await convertFromServer(readerOf('self'), 'appt-1001', options);
    expect(checks).toEqual(expected('self'));
    expect(notes).toEqual([
      { expression: "Coverage.where(id='cov-ellen-ended').period.end", diagnostics: 'ended before the date of service, though active: not verified', code: 'business-rule', severity: 'warning' },
    ]);
    await server.repo.deleteResource('Coverage', 'cov-ellen-ended');
  });

  it('searches the patient\'s active coverages, following next links across pages', async () => {
    const reader = await fhirKitReader(serverOf('primary-secondary').url);
    const search = jest.spyOn(reader, 'search');
    expect(await checksFromServer(reader, 'appt-4004', options)).toHaveLength(2);
    expect(search).toHaveBeenCalledWith('Coverage', { patient: 'Patient/pat-marco', status: 'active' });
    const coverages = await reader.search('Coverage', { _count: '1' });
    expect(coverages.map((c) => (c as Resource).id).sort()).toEqual(['cov-marco-aetna', 'cov-marco-delta', 'cov-marco-delta-old', 'cov-other-patient']);
  });

  it('searches coverages by patient, the parameter US Core servers must support, not beneficiary', async () => {
    // A chart in front of the fixture's that, as those servers may, refuses a search parameter it does not support.
    const upstream = serverOf('primary-secondary').url;
    const chart = await startScriptedServer(async (req, res) => {
      const url = new URL(req.url, 'http://chart');
      if (url.pathname === '/Coverage' && url.searchParams.has('beneficiary')) {
        const outcome = { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'not-supported', diagnostics: 'unknown search parameter: beneficiary' }] };
        return void res.writeHead(400, { 'content-type': 'application/fhir+json' }).end(JSON.stringify(outcome));
      }
      const answer = await fetch(`${upstream}${req.url}`);
      res.writeHead(answer.status, { 'content-type': 'application/fhir+json' }).end(await answer.text());
    });
    try {
      expect(await checksFromServer(await fhirKitReader(chart.url), 'appt-4004', options)).toEqual(expected('primary-secondary'));
    } finally {
      await chart.close();
    }
  });

  it('reads a search to its last page, however many, and refuses one it cannot read whole, for good', async () => {
    const reader = await fhirKitReader(serverOf('primary-secondary').url, { maxPages: 3 });
    // Four coverages a page at a time: four pages, past the old cut at a page count, read whole or refused.
    // A FhirInputError: searched again, the server pages so again (the sync keeps what needed it for a person, not to try again).
    await expect(reader.search('Coverage', { _count: '1' })).rejects.toMatchObject(refusal("Coverage: the FHIR server's search gave more than 3 pages; refused rather than read in part"));
    const whole = await fhirKitReader(serverOf('primary-secondary').url, { maxPages: 4 });
    expect(await whole.search('Coverage', { _count: '1' })).toHaveLength(4);
    // A server whose next link leads back to a page it gave.
    const circle = await startScriptedServer((req, res) => {
      const bundle = { resourceType: 'Bundle', type: 'searchset', entry: [{ resource: { resourceType: 'Coverage', id: `c${req.url.length}` } }], link: [{ relation: 'next', url: `${circleUrl}/Coverage?page=2` }] };
      res.writeHead(200, { 'content-type': 'application/fhir+json' }).end(JSON.stringify(bundle));
    });
    const circleUrl = circle.url;
    try {
      await expect((await fhirKitReader(circle.url)).search('Coverage', {})).rejects.toMatchObject(refusal("Coverage: the FHIR server's search gave a next link it had given before, after 2 pages; not read in part"));
    } finally {
      await circle.close();
    }
  });

  it('sends the chart\'s token nowhere but the chart: a redirect is not followed, nor a next link to another origin, each refused for good without the URL', async () => {
    const elsewhere = await startScriptedServer((_req, res) => void res.writeHead(200, { 'content-type': 'application/fhir+json' }).end(JSON.stringify({ resourceType: 'Bundle', type: 'searchset' })));
    // A chart behind a proxy that names another address in its redirects and next links (its inner http:// one, say).
    const chart = await startScriptedServer((req, res) => {
      if (req.url.startsWith('/fhir/Appointment') || req.url.startsWith('/fhir/Patient?')) return void res.writeHead(req.url.includes('?') ? 302 : 307, { location: `${elsewhere.url}${req.url}` }).end();
      const bundle = { resourceType: 'Bundle', type: 'searchset', entry: [{ resource: { resourceType: 'Coverage', id: 'c1' } }], link: [{ relation: 'next', url: `${elsewhere.url}/fhir/Coverage?page=2&patient=Patient/pat-ellen` }] };
      res.writeHead(200, { 'content-type': 'application/fhir+json' }).end(JSON.stringify(bundle));
    });
    try {
      const reader = await fhirKitReader(`${chart.url}/fhir`, { bearerToken: 'chart-token' });
      const redirect = 'a redirect, not followed: set the FHIR URL to where the chart answers';
      await expect(reader.read('Appointment', 'appt-1')).rejects.toMatchObject(refusal(`Appointment: the FHIR server answered 307 to the read, ${redirect}`));
      await expect(reader.search('Patient', { identifier: 'MRN-77' })).rejects.toMatchObject(refusal(`Patient: the FHIR server answered 302 to the search, ${redirect}`));
      // The origin the link leaves for, never the link: its query names the patient.
      await expect(reader.search('Coverage', { patient: 'Patient/pat-ellen' })).rejects.toMatchObject(
        refusal(`Coverage: the FHIR server's search gave a next link leaving it for ${elsewhere.url}; not followed, it would carry the chart's access token there`),
      );
      expect(elsewhere.requests).toEqual([]);
      expect(chart.requests.map((r) => r.headers.authorization)).toEqual(['Bearer chart-token', 'Bearer chart-token', 'Bearer chart-token']);
    } finally {
      await chart.close();
      await elsewhere.close();
    }
  });

  it('stops reading an answer past the chart\'s limit as it arrives, read, searched or a next page, declared or streamed', async () => {
    // 64 MB each, twice the limit: what the chart's socket buffers take beyond it is far less.
    const answers: ServerResponse[] = [];
    const chart: Awaited<ReturnType<typeof startScriptedServer>> = await startScriptedServer((_req, res, index) => {
      answers.push(res);
      if (index === 3) {
        const bundle = { resourceType: 'Bundle', type: 'searchset', entry: [{ resource: { resourceType: 'Coverage', id: 'c1' } }], link: [{ relation: 'next', url: `${chart.url}/fhir/Coverage?page=2` }] };
        return void res.writeHead(200, { 'content-type': 'application/fhir+json' }).end(JSON.stringify(bundle));
      }
      streamLarge(res, 64, { declared: index === 0 });
    });
    try {
      const reader = await fhirKitReader(`${chart.url}/fhir`, { bearerToken: 'chart-token' });
      // What the refusal reads as is for the sync to say; in Jest's VM fetch loses its cause (test/service/serve-chart-limit.test.ts).
      await expect(reader.read('Appointment', 'appt-4004')).rejects.toThrow();
      await expect(reader.read('Patient', 'pat-ellen')).rejects.toThrow();
      await expect(reader.search('Coverage', { patient: 'Patient/pat-ellen' })).rejects.toThrow();
      await expect(reader.search('Coverage', { patient: 'Patient/pat-ellen' })).rejects.toThrow();
      expect(chart.requests.map((r) => r.url)).toEqual(['/fhir/Appointment/appt-4004', '/fhir/Patient/pat-ellen', '/fhir/Coverage?patient=Patient%2Fpat-ellen', '/fhir/Coverage?patient=Patient%2Fpat-ellen', '/fhir/Coverage?page=2']);
      expect(answers.map((res) => res.writableFinished)).toEqual([false, false, false, true, false]);
    } finally {
      await chart.close();
    }
  });

  it('follows a next link where its origin was checked: "http:host/x" is a path of the chart, and a root-relative link is read from the chart\'s root', async () => {
    const elsewhere = await startScriptedServer((_req, res) => void res.writeHead(200, { 'content-type': 'application/fhir+json' }).end(JSON.stringify({ resourceType: 'Bundle', type: 'searchset' })));
    // Read on its own, 'http:localhost:<port>/x' is http://localhost:<port>/x; against the chart's URL, a path of it.
    const links = [`http:${new URL(elsewhere.url).host.replace('127.0.0.1', 'localhost')}/fhir/Coverage?page=2`, '/fhir/Coverage?page=3'];
    const chart = await startScriptedServer((_req, res, index) => {
      const bundle = { resourceType: 'Bundle', type: 'searchset', entry: [{ resource: { resourceType: 'Coverage', id: `c${index + 1}` } }], link: links[index] ? [{ relation: 'next', url: links[index] }] : [] };
      res.writeHead(200, { 'content-type': 'application/fhir+json' }).end(JSON.stringify(bundle));
    });
    try {
      const reader = await fhirKitReader(`${chart.url}/fhir`, { bearerToken: 'chart-token' });
      expect(await reader.search('Coverage', {})).toEqual(['c1', 'c2', 'c3'].map((id) => ({ resourceType: 'Coverage', id })));
      expect(elsewhere.requests).toEqual([]);
      expect(chart.requests.map((r) => r.url)).toEqual(['/fhir/Coverage', `/fhir/${links[0]?.slice('http:'.length)}`, '/fhir/Coverage?page=3']);
    } finally {
      await chart.close();
      await elsewhere.close();
    }
  });

  it('resolves a query-only next link as a browser would, against the URL of the page it came on, not the base', async () => {
    // As HAPI gives its pages: '?_getpages=…' on the search's own path, or on the path of the page before.
    const links = ['?_getpages=abc&_getpagesoffset=1', '?_getpages=abc&_getpagesoffset=2', '?_getpages=abc&_getpagesoffset=2'];
    const chart = await startScriptedServer((_req, res, index) => {
      const bundle = { resourceType: 'Bundle', type: 'searchset', entry: [{ resource: { resourceType: 'Coverage', id: `c${index + 1}` } }], link: links[index] ? [{ relation: 'next', url: links[index] }] : [] };
      res.writeHead(200, { 'content-type': 'application/fhir+json' }).end(JSON.stringify(bundle));
    });
    try {
      const reader = await fhirKitReader(`${chart.url}/fhir`, { bearerToken: 'chart-token' });
      // The third page gives the second's link again: a circle, as the URLs it resolves to say.
      await expect(reader.search('Coverage', { patient: 'Patient/pat-ellen' })).rejects.toMatchObject(refusal("Coverage: the FHIR server's search gave a next link it had given before, after 3 pages; not read in part"));
      expect(chart.requests.map((r) => r.url)).toEqual(['/fhir/Coverage?patient=Patient%2Fpat-ellen', `/fhir/Coverage${links[0]}`, `/fhir/Coverage${links[1]}`]);
    } finally {
      await chart.close();
    }
  });

  it('takes a refusal the chart would give again (400, 401, 403, a search 404) as final, naming its status and never the query, and 404 or 410 on a read as not there', async () => {
    const outcome = (code: string) => ({ resourceType: 'OperationOutcome', issue: [{ severity: 'error', code, diagnostics: 'no access to Patient/pat-ellen' }] });
    const answers: Record<string, [number, unknown]> = {
      '/fhir/Appointment/appt-locked': [403, outcome('forbidden')],
      '/fhir/Appointment/appt-stale': [401, outcome('login')],
      '/fhir/Appointment/appt-gone': [410, outcome('deleted')],
      '/fhir/Appointment/appt-none': [404, outcome('not-found')],
      '/fhir/Coverage?patient=Patient%2Fpat-ellen': [400, outcome('not-supported')],
      '/fhir/Account?patient=Patient%2Fpat-ellen': [404, 'Not Found'],
    };
    const chart = await startScriptedServer((req, res) => {
      const [status, body] = answers[req.url] ?? [500, outcome('exception')];
      res.writeHead(status, { 'content-type': 'application/fhir+json' }).end(typeof body === 'string' ? body : JSON.stringify(body));
    });
    try {
      const reader = await fhirKitReader(`${chart.url}/fhir`, { bearerToken: 'chart-token' });
      await expect(reader.read('Appointment', 'appt-locked')).rejects.toMatchObject(refusal('Appointment: the FHIR server answered 403 to the read: request (forbidden)'));
      // A static token is not renewed: refused, it is refused again.
      await expect(reader.read('Appointment', 'appt-stale')).rejects.toMatchObject(refusal('Appointment: the FHIR server answered 401 to the read: request (login)'));
      await expect(reader.read('Appointment', 'appt-gone')).resolves.toBeUndefined();
      await expect(reader.read('Appointment', 'appt-none')).resolves.toBeUndefined();
      const searched = await reader.search('Coverage', { patient: 'Patient/pat-ellen' }).catch((err: unknown) => err);
      expect(searched).toMatchObject(refusal('Coverage: the FHIR server answered 400 to the search: request (not-supported)'));
      await expect(reader.search('Account', { patient: 'Patient/pat-ellen' })).rejects.toMatchObject(refusal('Account: the FHIR server answered 404 to the search'));
      // What was searched by, and what the chart's diagnostics say, are in no message.
      expect(JSON.stringify([searched, (searched as FhirInputError).outcome])).not.toMatch(/pat-ellen/);
      expect(chart.requests).toHaveLength(6);
    } finally {
      await chart.close();
    }
  });

  it('reads by an R4 id alone: one a caller passes that a URL would take as a path or a query reads nothing', async () => {
    const chart = await startScriptedServer((_req, res) => void res.writeHead(200, { 'content-type': 'application/fhir+json' }).end(JSON.stringify({ resourceType: 'Patient', id: 'pat-marco' })));
    try {
      const reader = await fhirKitReader(`${chart.url}/fhir`);
      for (const id of ['appt-4004/../../Patient/pat-marco', 'appt-4004?_elements=id', 'appt 4004', '', '.', '..']) {
        await expect(reader.read('Appointment', id)).rejects.toThrow("FHIR read Appointment: the id is not an R4 id (1 to 64 letters, digits, '-' and '.')");
      }
      expect(chart.requests).toEqual([]);
    } finally {
      await chart.close();
    }
  });

  it('refuses a plain http chart on another machine unless allowed, as the writer does, before anything is sent', async () => {
    await expect(fhirKitReader('http://chart.example.test/fhir', { bearerToken: 'secret-token' })).rejects.toThrow(
      "baseUrl: plain http to a host other than this machine would send the chart's access token and patient data unencrypted; use https, or allow it explicitly (allowInsecureHttp)",
    );
    await expect(fhirKitReader('http://chart.example.test/fhir', { allowInsecureHttp: true })).resolves.toBeDefined();
  });

  it('refuses a timeoutMs longer than a timer waits, as the writer does: Node would give up every read at once', async () => {
    const { url } = serverOf('primary-secondary');
    await expect(fhirKitReader(url, { timeoutMs: 3_000_000_000 })).rejects.toThrow('timeoutMs: must be at most 2147483647 (about 24 days), the longest a timer waits');
    await expect(fhirKitReader(url, { timeoutMs: 0 })).rejects.toThrow(/^timeoutMs: /);
    const longest = await fhirKitReader(url, { timeoutMs: 2_147_483_647 });
    expect(await checksFromServer(longest, 'appt-4004', options)).toEqual(expected('primary-secondary'));
  });

  it('passes network failures and a server failing through to the caller, to be tried again, named as the chart out of reach without the URL', async () => {
    const closed = await startFhirServer();
    const url = closed.url;
    await closed.close();
    const unreachable = await checksFromServer(await fhirKitReader(url), 'appt-1001', options).catch((err: unknown) => err);
    // fetch's own 'fetch failed' named neither the chart nor why, in the log line and the notification's dead letter.
    expect(unreachable).not.toBeInstanceOf(FhirInputError);
    expect((unreachable as Error).message).toMatch(/^Appointment: the FHIR server could not be reached for the read \(ECONNREFUSED\)$/);
    // Slow, throttling, failing: each may answer otherwise later.
    let status = 0;
    const failing = await startScriptedServer((_req, res) => void res.writeHead(status).end());
    try {
      const reader = await fhirKitReader(failing.url);
      for (status of [408, 429, 503]) {
        const read = await reader.read('Appointment', 'appt-1001').catch((e: unknown) => e);
        const searched = await reader.search('Coverage', { patient: 'Patient/pat-ellen' }).catch((e: unknown) => e);
        expect([read, searched].map((err) => [err instanceof FhirInputError, (err as Error).message])).toEqual([
          [false, `Appointment: the FHIR server answered ${status} to the read`],
          [false, `Coverage: the FHIR server answered ${status} to the search`],
        ]);
      }
    } finally {
      await failing.close();
    }
  });

  it('gives up on a FHIR server that never answers after timeoutMs, reading or searching', async () => {
    const silent = await startScriptedServer(() => undefined);
    const reader = await fhirKitReader(silent.url, { timeoutMs: 300 });
    const started = Date.now();
    // Named as the writer names it, not as 'The operation was aborted due to timeout'.
    await expect(reader.read('Appointment', 'appt-1001')).rejects.toThrow(/^Appointment: the FHIR server did not answer the read in time$/);
    await expect(reader.search('Coverage', { beneficiary: 'Patient/pat-ellen' })).rejects.toThrow(/^Coverage: the FHIR server did not answer the search in time$/);
    expect(Date.now() - started).toBeLessThan(3000);
    await silent.close();
  });
});
