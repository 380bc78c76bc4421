# run: goloop serve main:app
# check: GET /items/5?q=x -> 200 {"item_id": 5, "q": "x"}
# needs: fastapi
from fastapi import FastAPI

app = FastAPI()


@app.get("/items/{item_id}")
async def read_item(item_id: int, q: str | None = None):
    return {"item_id": item_id, "q": q}
