import { readFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import { projectRoot } from '../../src/mapping-files';
import { createLogger } from '../../src/service/logger';
import { cli } from '../support/cli';
import { forbiddenTerms, isLogLine } from './log-terms';

/** The log scan itself: it knows the fixtures' patient data, and every log road reaches its capture file. */
const captured = () => {
  const dir = process.env.DENTAL_ELIG_LOG_CAPTURE_DIR;
  if (!dir) throw new Error('DENTAL_ELIG_LOG_CAPTURE_DIR is not set: jest.config.cjs runs log-scan.setup.ts');
  return readFileSync(path.join(dir, `worker-${process.env.JEST_WORKER_ID ?? '0'}.log`), 'utf8');
};

describe('log scan', () => {
  const terms = forbiddenTerms(projectRoot);
  const request = JSON.parse(readFileSync(path.join(projectRoot, 'fixtures', 'requests', 'complete-self.json'), 'utf8')) as {
    patient: { lastName: string; dateOfBirth: string };
    subscriber: { memberId: string };
    provider: { lastName: string };
  };
  const hits = (line: string) => terms.filter((t) => t.pattern.test(line)).map((t) => t.kind);

  it('finds the fixtures names, birth dates (ISO and HL7) and member ids, and secrets, but not providers', () => {
    expect(hits(`{"level":30,"msg":"${request.patient.lastName.toUpperCase()}"}`)).toContain('name');
    expect(hits(request.patient.dateOfBirth)).toContain('birth date');
    expect(hits(`PID|1||X||A^B||${request.patient.dateOfBirth.replaceAll('-', '')}|F`)).toContain('birth date');
    expect(hits(`member ${request.subscriber.memberId}`)).toContain('member id');
    expect(hits('key sk_sandbox_0000000000000000')).toEqual(['secret']);
    expect(hits('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')).toEqual(['secret']);
    // The provider is not a patient: the fixture's provider name is no term unless a patient has it too.
    expect(terms.some((t) => t.text === request.provider.lastName && t.kind !== 'name')).toBe(false);
    expect(hits('check written: elig_47b5db8eabbb8120206b8a6c1d393496 complete')).toEqual([]);
  });

  it('takes pino JSON and dental-elig lines from stdout and stderr, and everything from log roads', () => {
    expect(isLogLine('stderr', '{"level":40,"msg":"x"}')).toBe(true);
    expect(isLogLine('stderr', 'dental-elig: bad input')).toBe(true);
    expect(isLogLine('stdout', 'CoverageEligibilityResponse printed by convert')).toBe(false);
    expect(isLogLine('pino', 'anything')).toBe(true);
  });

  it('captures a pino destination, the in-process CLI stderr and a child process stderr', async () => {
    const marker = `capture-${process.pid}-${Date.now()}`;
    const lines: string[] = [];
    createLogger({ destination: { write: (l: string) => lines.push(l) } as unknown as NodeJS.WritableStream }).info({ marker }, 'probe');
    expect(lines.join('')).toContain(marker);

    const run = await cli(['verify', `--${marker}`]);
    expect(run.code).not.toBe(0);

    const child = spawn(process.execPath, ['-e', `process.stderr.write('child ${marker}\\n')`]);
    await new Promise((resolve) => child.once('close', resolve));

    const text = captured();
    expect(text).toMatch(new RegExp(`^pino\\t.*${marker}`, 'm'));
    expect(text).toMatch(new RegExp(`^cli-stderr\\t.*${marker}`, 'm'));
    expect(text).toMatch(new RegExp(`^child-stderr\\tchild ${marker}`, 'm'));
  });
});
