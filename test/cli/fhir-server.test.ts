import { Readable } from 'node:stream';
import { request } from 'undici';
import { runCli } from '../../src/cli/main';
import { cli } from '../support/cli';
import { startScriptedServer } from '../support/http-server';

/** Starts `dental-elig fhir-server` in-process and resolves with its first line once it is listening. */
async function startCommand(args: string[]): Promise<{ lines: () => string; stop: () => Promise<number> }> {
  const controller = new AbortController();
  let out = '';
  let err = '';
  const done = runCli(['fhir-server', '--port', '0', ...args], {
    stdout: { write: (s: string) => (out += s) },
    stderr: { write: (s: string) => (err += s) },
    stdin: Readable.from([]),
    env: {},
    signal: controller.signal,
  });
  for (let i = 0; i < 200 && !out.includes('\n') && !err; i++) await new Promise((r) => setTimeout(r, 25));
  if (err) throw new Error(err);
  return {
    lines: () => out,
    stop: async () => {
      controller.abort();
      return done;
    },
  };
}

describe('dental-elig fhir-server', () => {
  it('prints its FHIR base, serves a seeded chart to convert fhir --server, refuses invalid writes, and stops on the signal', async () => {
    const server = await startCommand(['--seed', 'fixtures/fhir/primary-secondary.bundle.json']);
    const url = /^listening: fhir (http:\/\/127\.0\.0\.1:\d+\/fhir\/R4)$/m.exec(server.lines())?.[1];
    expect(url).toBeDefined();
    expect(server.lines()).toMatch(/^chart: {5}\d+ resources from fixtures\/fhir\/primary-secondary\.bundle\.json$/m);
    try {
      const converted = await cli(['convert', 'fhir', '--server', url ?? '', '--appointment', 'appt-4004', '--received-at', '2026-11-21T10:00:00Z']);
      expect(converted.stderr).toBe('');
      expect((JSON.parse(converted.stdout) as Array<{ coverage: { order: string } }>).map((c) => c.coverage.order)).toEqual(['primary', 'secondary']);
      const invalid = await request(`${url}/Patient`, {
        method: 'POST',
        headers: { 'content-type': 'application/fhir+json' },
        body: JSON.stringify({ resourceType: 'Patient', gender: 'sometimes' }),
      });
      expect(invalid.statusCode).toBe(422);
      expect(((await invalid.body.json()) as { resourceType: string }).resourceType).toBe('OperationOutcome');
    } finally {
      expect(await server.stop()).toBe(0);
    }
    expect(server.lines()).toMatch(/fhir server stopped\n$/);
  });

  it('refuses a seed that is not a Bundle, naming the file', async () => {
    const run = await cli(['fhir-server', '--seed', 'fixtures/requests/complete-self.json']);
    expect(run).toEqual({ code: 1, stdout: '', stderr: 'dental-elig: fixtures/requests/complete-self.json: resourceType: must be Bundle\n' });
  });

  it('says what a refused connection is when the server is not running', async () => {
    const gone = await startScriptedServer(() => undefined);
    await gone.close(); // a port where nothing listens now
    const run = await cli(['convert', 'fhir', '--server', `${gone.url}/fhir/R4`, '--appointment', 'appt-4004']);
    expect(run).toEqual({ code: 1, stdout: '', stderr: `dental-elig: --server: connection refused at ${gone.url}/fhir/R4 (ECONNREFUSED)\n` });
  });
});
