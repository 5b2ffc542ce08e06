import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { DEFAULT_API_KEY, DEFAULT_TIMING, NO_CLAIMS_MEMBER_ID, SCENARIOS, defaultPayers } from '../../src/sandbox';

const readme = readFileSync(path.join(__dirname, '../../src/sandbox/README.md'), 'utf8');

test('the README lists every scenario, as the code defines it', () => {
  const rows = [...readme.matchAll(/^\| `(SBX-[A-Z0-9a-z-]+)` \| (.+) \|$/gm)].map((m) => [m[1], m[2]]);
  expect(rows).toEqual(SCENARIOS.map((s) => [s.memberId, s.outcome]));
  expect(readme).toContain(`\`${NO_CLAIMS_MEMBER_ID}\``);
});

test('the README states the defaults the code has', () => {
  expect(readme).toContain(DEFAULT_API_KEY);
  for (const [name, value] of Object.entries(DEFAULT_TIMING)) expect(readme).toMatch(new RegExp(`\\| \`${name}\` \\| ${value} \\|`));
  const count = ['Zero', 'One', 'Two', 'Three', 'Four', 'Five', 'Six', 'Seven', 'Eight', 'Nine', 'Ten', 'Eleven', 'Twelve', 'Thirteen', 'Fourteen', 'Fifteen', 'Sixteen'][defaultPayers().length];
  expect(readme).toContain(`${count} payers`);
});
