"""Running test work in several Python threads at once."""
import threading


def run_threads(work, n):
    """work(k) in n threads at once; their results, and any exception re-raised."""
    results, errors = [None] * n, []
    start = threading.Barrier(n)

    def body(k):
        try:
            start.wait()
            results[k] = work(k)
        except BaseException as e:             # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
