// A stand-in for the "@company/sdk" of the protocol's Example 2.
import { appendFileSync } from 'node:fs';
export async function getTrainSchedule() { return [{ hour: 8, destination: 'Boston' }]; }
export async function createNote(text) { appendFileSync('notes.txt', text + '\n'); }
