import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { Appointment, Bundle, CoverageEligibilityResponse } from 'fhir/r4';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import { BUNDLE_DIR, CREATED, RESULT_DIR, RESULT_REFS } from '../adapters/fhir/corpus';
import { cli } from '../support/cli';
import { startScriptedServer } from '../support/http-server';

/** `convert fhir` and `convert result` in-process: output on stdout, one line on stderr for bad input. */
const bundleFile = (name: string) => path.join(BUNDLE_DIR, `${name}.bundle.json`);
const resultFile = (name: string) => path.join(RESULT_DIR, `${name}.json`);
const expected = (file: string) => JSON.parse(readFileSync(file, 'utf8')) as unknown;
const refs = ['--patient', RESULT_REFS.patient, '--coverage', RESULT_REFS.coverage];

function expectOneLine(run: { code: number; stdout: string; stderr: string }, message: string | RegExp) {
  expect(run.code).not.toBe(0);
  expect(run.stdout).toBe('');
  expect(run.stderr.split('\n').filter(Boolean)).toHaveLength(1);
  expect(run.stderr).toMatch(message);
  expect(run.stderr).not.toMatch(/\s+at .+:\d+:\d+/);
}

describe('dental-elig convert fhir', () => {
  it('prints the checks of a Bundle as one JSON array', async () => {
    const run = await cli(['convert', 'fhir', bundleFile('primary-secondary'), '--received-at', '2026-11-20T15:00:00Z']);
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(run.stdout)).toEqual(expected(path.join(BUNDLE_DIR, 'primary-secondary.expected.json')));
  });

  it('reads the Bundle from stdin with -', async () => {
    const run = await cli(['convert', 'fhir', '-', '--received-at', '2026-11-20T15:00:00Z'], {}, readFileSync(bundleFile('child'), 'utf8'));
    expect(JSON.parse(run.stdout)).toEqual(expected(path.join(BUNDLE_DIR, 'child.expected.json')));
  });

  it('prints what the conversion left out on stderr, a line each, and the checks it made on stdout', async () => {
    const run = await cli(['convert', 'fhir', bundleFile('coverage-not-in-force'), '--received-at', '2026-11-20T15:00:00Z']);
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual((expected(path.join(BUNDLE_DIR, 'coverage-not-in-force.expected.json')) as { checks: unknown }).checks);
    expect(run.stderr.split('\n').filter(Boolean)).toEqual([
      "dental-elig: warning: Coverage.where(id='cov-p7-delta-ended').period.end: ended before the date of service, though active: not verified",
      "dental-elig: information: Coverage.where(id='cov-p7-metlife-next').period.start: starts after the date of service: no check",
    ]);
  });

  it('prints [] for an appointment in a status not verified, and a note naming the status on stderr', async () => {
    for (const status of ['cancelled', 'proposed', 'waitlist', 'fulfilled']) {
      const bundle = JSON.parse(readFileSync(bundleFile('self'), 'utf8')) as Bundle;
      const appointment = bundle.entry?.find((e) => e.resource?.resourceType === 'Appointment')?.resource as { status: string };
      appointment.status = status;
      const run = await cli(['convert', 'fhir', '-'], {}, JSON.stringify(bundle));
      expect({ status, code: run.code, stdout: JSON.parse(run.stdout) as unknown }).toEqual({ status, code: 0, stdout: [] });
      expect(run.stderr).toBe(
        `dental-elig: note: Appointment.status is ${status}: appointments in that status are not verified (mappings/fhir/appointment-status.json), so there are no checks\n`,
      );
    }
    // A booking with no coverage is another empty list, and says nothing of status.
    expect(await cli(['convert', 'fhir', bundleFile('self-pay')])).toMatchObject({ code: 0, stderr: '' });
  });

  it('stamps now as the receipt time unless told', async () => {
    const before = Date.now();
    const [check] = JSON.parse((await cli(['convert', 'fhir', bundleFile('self')])).stdout) as Array<{ source: { receivedAt: string } }>;
    expect(Date.parse(check?.source.receivedAt ?? '')).toBeGreaterThanOrEqual(before - 1000);
  });

  it('reads a Bundle a Windows editor saved with a byte-order mark, and names UTF-16 rather than misreading it', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'bom-'));
    try {
      const text = readFileSync(bundleFile('primary-secondary'), 'utf8');
      const bom = path.join(dir, 'bom.json');
      writeFileSync(bom, `\uFEFF${text}`);
      const run = await cli(['convert', 'fhir', bom, '--received-at', '2026-11-20T15:00:00Z']);
      expect(run).toMatchObject({ code: 0, stderr: '' });
      expect(JSON.parse(run.stdout)).toEqual(expected(path.join(BUNDLE_DIR, 'primary-secondary.expected.json')));
      // As Windows PowerShell 5's > writes it.
      const utf16 = path.join(dir, 'utf16.json');
      writeFileSync(utf16, Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(text, 'utf16le')]));
      expectOneLine(await cli(['convert', 'fhir', utf16]), `dental-elig: ${utf16}: UTF-16 text (Windows PowerShell 5 writes it with >): save it as UTF-8`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('names what is wrong in one line: the element, the file, the option', async () => {
    expectOneLine(await cli(['convert', 'fhir', bundleFile('error-patient-data')]), /^dental-elig: 2 problems: Patient\.birthDate: required; Patient\.gender: must be one of female, male, other, unknown$/m);
    expectOneLine(await cli(['convert', 'fhir', 'nope.json']), 'dental-elig: nope.json: no such file');
    expectOneLine(await cli(['convert', 'fhir', '-'], {}, '{"resourceType":'), /^dental-elig: stdin: not valid JSON/);
    expectOneLine(await cli(['convert', 'fhir', bundleFile('self'), '--received-at', 'yesterday']), '--received-at: must be an ISO 8601 date-time with offset');
    expectOneLine(await cli(['convert', 'fhir']), 'give either a Bundle file or --server');
  });

  describe('--server', () => {
    let server: FhirServer;
    beforeAll(async () => {
      server = await startFhirServer();
      for (const entry of (expected(bundleFile('self')) as Bundle).entry ?? []) {
        if (entry.resource) await server.repo.createResource(entry.resource as Parameters<FhirServer['repo']['createResource']>[0]);
      }
    });
    afterAll(async () => {
      await server?.close();
    });

    it('reads the appointment and what it needs from a FHIR server', async () => {
      const run = await cli(['convert', 'fhir', '--server', server.url, '--appointment', 'appt-1001', '--received-at', '2026-11-20T15:00:00Z']);
      expect(run).toMatchObject({ code: 0, stderr: '' });
      expect(JSON.parse(run.stdout)).toEqual(expected(path.join(BUNDLE_DIR, 'self.expected.json')));
    });

    it('notes the status of an appointment it does not verify, as for a Bundle', async () => {
      const appointment = (expected(bundleFile('self')) as Bundle).entry?.find((e) => e.resource?.resourceType === 'Appointment')?.resource as Appointment;
      await server.repo.createResource({ ...appointment, id: 'appt-waitlisted', status: 'waitlist' });
      const run = await cli(['convert', 'fhir', '--server', server.url, '--appointment', 'appt-waitlisted']);
      expect({ code: run.code, stdout: JSON.parse(run.stdout) as unknown }).toEqual({ code: 0, stdout: [] });
      expect(run.stderr).toMatch(/^dental-elig: note: Appointment\.status is waitlist: appointments in that status are not verified/);
    });

    it('needs --appointment, and reports an unknown appointment or a server it cannot reach in one line', async () => {
      expectOneLine(await cli(['convert', 'fhir', '--server', server.url]), '--server needs --appointment');
      expectOneLine(await cli(['convert', 'fhir', '--server', server.url, '--appointment', 'nope']), 'Appointment: the server has no Appointment with id nope');
      expectOneLine(await cli(['convert', 'fhir', '--server', 'ftp://x', '--appointment', 'a']), '--server: must be an http(s) URL');
      expectOneLine(
        await cli(['convert', 'fhir', '--server', 'http://ehr.example.test/fhir', '--appointment', 'a']),
        "--server: plain http to a host other than this machine would send the chart's access token and patient data unencrypted; use https, or allow it explicitly (DENTAL_ELIG_ALLOW_INSECURE_HTTP=1)",
      );
      // Credentials in the URL never reach the server (fetch refuses them) and must not be echoed.
      const withPassword = await cli(['convert', 'fhir', '--server', server.url.replace('//', '//clinic:s3cret-pw@'), '--appointment', 'appt-1001']);
      expectOneLine(withPassword, '--server: credentials do not belong in the URL; the bearer token comes from DENTAL_ELIG_FHIR_TOKEN');
      expect(withPassword.stderr).not.toContain('s3cret-pw');
      const closed = await startFhirServer();
      await closed.close();
      expectOneLine(await cli(['convert', 'fhir', '--server', closed.url, '--appointment', 'appt-1001']), /^dental-elig: --server: /);
    });

    it('says in one line that the chart redirected a read or search, not where to, nor what it searched by', async () => {
      // The server, but for its Coverage searches, which it redirects.
      const chart = await startScriptedServer(async (req, res) => {
        if (req.url.startsWith('/Coverage?')) return void res.writeHead(303, { location: `https://chart.example.test${req.url}` }).end();
        const upstream = await fetch(`${server.url}${req.url}`, { headers: { accept: 'application/fhir+json' } });
        res.writeHead(upstream.status, { 'content-type': 'application/fhir+json' }).end(await upstream.text());
      });
      try {
        const run = await cli(['convert', 'fhir', '--server', chart.url, '--appointment', 'appt-1001']);
        expectOneLine(run, /^dental-elig: Coverage: the FHIR server answered 303 to the search, a redirect, not followed: set the FHIR URL to where the chart answers\n$/);
        expect(chart.requests.map((r) => r.url)).toContain('/Coverage?patient=Patient%2Fpat-ellen&status=active');
      } finally {
        await chart.close();
      }
    });

    it('says in one line that the chart refused a search, or failed it, with the status and never what it searched by', async () => {
      let status = 403;
      // The server, but for its Coverage searches, which it refuses, then fails.
      const chart = await startScriptedServer(async (req, res) => {
        const outcome = { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: status === 403 ? 'forbidden' : 'exception', diagnostics: 'Patient/pat-ellen is restricted' }] };
        if (req.url.startsWith('/Coverage?')) return void res.writeHead(status, { 'content-type': 'application/fhir+json' }).end(JSON.stringify(outcome));
        const upstream = await fetch(`${server.url}${req.url}`, { headers: { accept: 'application/fhir+json' } });
        res.writeHead(upstream.status, { 'content-type': 'application/fhir+json' }).end(await upstream.text());
      });
      try {
        expectOneLine(await cli(['convert', 'fhir', '--server', chart.url, '--appointment', 'appt-1001']), /^dental-elig: Coverage: the FHIR server answered 403 to the search: request \(forbidden\)\n$/);
        status = 503;
        expectOneLine(await cli(['convert', 'fhir', '--server', chart.url, '--appointment', 'appt-1001']), /^dental-elig: --server: Coverage: the FHIR server answered 503 to the search: request \(exception\)\n$/);
      } finally {
        await chart.close();
      }
    });
  });
});

describe('dental-elig convert result', () => {
  it('prints the CoverageEligibilityResponse of a result', async () => {
    const run = await cli(['convert', 'result', resultFile('completed-full'), ...refs, '--insurer', 'Organization/org-delta-ca', '--created', CREATED]);
    expect(run).toMatchObject({ code: 0, stderr: '' });
    const response = JSON.parse(run.stdout) as CoverageEligibilityResponse;
    const golden = expected(path.join(RESULT_DIR, 'completed-full.expected.json')) as CoverageEligibilityResponse;
    expect({ ...response, insurer: undefined }).toEqual({ ...golden, insurer: undefined });
    expect(response.insurer).toMatchObject({ reference: 'Organization/org-delta-ca', display: 'Delta Dental of California' });
  });

  it('reads stdin with - and takes a request reference', async () => {
    const run = await cli(['convert', 'result', '-', ...refs, '--request', 'CoverageEligibilityRequest/cer-9'], {}, readFileSync(resultFile('partial'), 'utf8'));
    const response = JSON.parse(run.stdout) as CoverageEligibilityResponse;
    expect(response).toMatchObject({ outcome: 'partial', request: { reference: 'CoverageEligibilityRequest/cer-9' } });
  });

  it('names what is wrong in one line, never with a stack trace', async () => {
    expectOneLine(await cli(['convert', 'result', resultFile('failed-site-maintenance'), ...refs]), 'dental-elig: insurer: the result names no payer: give an Organization reference');
    expectOneLine(await cli(['convert', 'result', resultFile('pending'), '--patient', 'pat-1', '--coverage', 'Coverage/c1']), 'dental-elig: patient: must be a reference Patient/<id>');
    expectOneLine(await cli(['convert', 'result', '-', ...refs], {}, '{"status":"Completed"}'), 'dental-elig: stdin: correlationId: ');
    expectOneLine(await cli(['convert', 'result', '-', ...refs], {}, '{"correlationId":"c","status":"Lost"}'), 'dental-elig: status: is not Completed, Partial, Failed or Pending');
    expectOneLine(await cli(['convert', 'result', '-', ...refs], {}, '[1,'), /^dental-elig: stdin: not valid JSON/);
  });

  it('is a usage error (exit 2) without --patient or --coverage', async () => {
    const run = await cli(['convert', 'result', resultFile('pending'), '--patient', 'Patient/p']);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/required option '--coverage <reference>' not specified/);
  });
});
