"""`cli.py serve`: the trained agent served to the game as an OpenAI-compatible endpoint.

- `registry`: which models a server holds (a base model, RUN@STEP checkpoints, improve's promoted model)
  and loading them (adapters share one copy of their base);
- `prompting`: a chat request turned into what the model was trained on (`decision_prompt`), or served as it is;
- `engine`: the bounded queue and the dynamic batcher that runs the one decoding path (`babylon_rl.policy`);
- `request`: the request as pydantic checks it, and the fields refused (a 400 naming them, never a silent drop);
- `streaming`: `stream: true` as server-sent events;
- `bounds`: the body counted as it arrives, a request's client and deadline watched while it waits;
- `api`: the HTTP boundary (FastAPI on uvicorn): OpenAI-shaped answers and errors, the key.
"""

