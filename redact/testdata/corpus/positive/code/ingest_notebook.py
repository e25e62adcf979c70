# %% [markdown]
# # Support ticket enrichment
# Pulls the last 30 days of tickets, embeds them and writes clusters back to the warehouse.
# Owner: data-platform. Run on the shared notebook server, kernel "py312-ml".

# %%
import datetime as dt
import os

import anthropic
import boto3
import cohere
import pandas as pd
from huggingface_hub import login
from sqlalchemy import create_engine

# %%
login(token="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")

engine = create_engine("postgresql+psycopg://etl:06diJQIAnVQLoS5vtvrr9qXllV2@warehouse.internal:5432/analytics")
s3 = boto3.client(
    "s3",
    aws_access_key_id="AKIAYQNRYBL4KMAOFGT4",
    aws_secret_access_key="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",
    region_name="eu-west-1",
)

# %%
since = dt.date.today() - dt.timedelta(days=30)
tickets = pd.read_sql(
    "select id, subject, body, created_at from support.tickets where created_at >= %(since)s",
    engine,
    params={"since": since},
)
print(len(tickets), "tickets")

# %%
co = cohere.ClientV2(api_key="ZFmOW38m9Ho9z6Y9gWjYoCzR1ZVldbyDQYgarmca")
resp = co.embed(
    texts=tickets["subject"].fillna("").tolist(),
    model="embed-english-v3.0",
    input_type="clustering",
    embedding_types=["float"],
)
tickets["embedding"] = resp.embeddings.float_

# %%
claude = anthropic.Anthropic(api_key="sk-ant-api03-O8juMXVD8sgKJcp8ZjMs1iGj-VpSFgmqPYpbMiM7zJl4nmh4vxexIrAfvWltT6_QOPoLm7zWQ2nr9_6fN1zauRRKoSmS9AA")
def label_cluster(samples):
    msg = claude.messages.create(
        model="claude-3-5-haiku-latest",
        max_tokens=50,
        messages=[{"role": "user", "content": "Name this group of tickets in 3 words:\n" + "\n".join(samples)}],
    )
    return msg.content[0].text.strip()

# %%
out = tickets.drop(columns=["body"])
out.to_parquet("/tmp/ticket_clusters.parquet")
s3.upload_file("/tmp/ticket_clusters.parquet", "northwind-analytics", f"clusters/{since:%Y-%m-%d}.parquet")
