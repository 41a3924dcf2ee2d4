"""The student's and its critic's P&L on the dev world's held-out decisions, by what each answered (reads student_vs_critic.jsonl)."""
import json
from collections import defaultdict
from pathlib import Path

rows = [json.loads(line) for line in Path(__file__).with_name("student_vs_critic.jsonl").read_text().splitlines()]
print(f"{len(rows)} decisions: critic {sum(r['critic_pnl'] for r in rows) / len(rows):+.1f} a decision, "
      f"student {sum(r['student_pnl'] for r in rows) / len(rows):+.1f}")
pairs = defaultdict(list)
for r in rows:
    pairs[(json.loads(r["critic"])["action"], json.loads(r["student"])["action"])].append(r)
for (critic, student), group in sorted(pairs.items()):
    print(f"critic {critic:>4}, student {student:>4}: {len(group):>3} decisions; critic P&L {sum(r['critic_pnl'] for r in group):+6.0f} "
          f"({sum(r['critic_right'] for r in group)} right), student P&L {sum(r['student_pnl'] for r in group):+6.0f} "
          f"({sum(r['student_right'] for r in group)} right)")
