import sys, collections
incl = collections.Counter(); threads = collections.Counter(); total = 0
for line in open(sys.argv[1]):
    stack, n = line.rstrip().rsplit(" ", 1); n = int(n); total += n
    frames = stack.split(";")
    threads[frames[0]] += n
    seen = set()
    for f in frames:
        key = f.split(" (")[0] + " " + (f.split("/")[-1] if "/" in f else "")
        if key not in seen:
            incl[key] += n; seen.add(key)
print("total", total)
for t, n in threads.most_common(10): print(f"{n:6d} {t}")
for k, n in incl.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 60): print(f"{n:6d} {n/total:.2f} {k[:150]}")
