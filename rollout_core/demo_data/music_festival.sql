-- A three-day music festival: stages, artists, the running order and ticket sales.

CREATE TABLE stages (
    stage_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    capacity INTEGER NOT NULL,
    covered INTEGER NOT NULL CHECK (covered IN (0, 1))
);

CREATE TABLE artists (
    artist_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    genre TEXT NOT NULL,
    country TEXT NOT NULL,
    formed_year INTEGER NOT NULL
);

CREATE TABLE performances (
    performance_id INTEGER PRIMARY KEY,
    artist_id INTEGER NOT NULL REFERENCES artists (artist_id),
    stage_id INTEGER NOT NULL REFERENCES stages (stage_id),
    day TEXT NOT NULL,
    start_time TEXT NOT NULL,
    duration_minutes INTEGER NOT NULL
);

CREATE TABLE tickets (
    ticket_id INTEGER PRIMARY KEY,
    ticket_type TEXT NOT NULL,
    price REAL NOT NULL,
    buyer_country TEXT NOT NULL,
    purchase_date TEXT NOT NULL
);

INSERT INTO stages (stage_id, name, capacity, covered) VALUES
    (1, 'Main Stage', 20000, 0),
    (2, 'Forest Stage', 6000, 0),
    (3, 'Big Top', 2500, 1),
    (4, 'Lakeside Stage', 4000, 0),
    (5, 'Cellar Club', 400, 1);

INSERT INTO artists (artist_id, name, genre, country, formed_year) VALUES
    (1, 'The Velvet Tides', 'Rock', 'England', 2009),
    (2, 'Nova Lark', 'Pop', 'Sweden', 2016),
    (3, 'Kaleido Drums', 'World', 'Senegal', 2011),
    (4, 'Midnight Ferry', 'Indie', 'Ireland', 2014),
    (5, 'Solenne', 'Electronic', 'France', 2018),
    (6, 'Iron Orchard', 'Metal', 'Finland', 2005),
    (7, 'Paper Satellites', 'Indie', 'Canada', 2017),
    (8, 'Mira Sol', 'Pop', 'Spain', 2019),
    (9, 'The Gravel Saints', 'Rock', 'USA', 2003),
    (10, 'Lowland Choir', 'Folk', 'Netherlands', 2012),
    (11, 'Static Bloom', 'Electronic', 'Germany', 2015),
    (12, 'Amber Coastline', 'Folk', 'Scotland', 2010),
    (13, 'Dune Radio', 'Electronic', 'Morocco', 2020),
    (14, 'Harbour Lights', 'Indie', 'England', 2013),
    (15, 'Tundra Wolves', 'Metal', 'Norway', 2008),
    (16, 'Cosmo Junction', 'Jazz', 'USA', 2001),
    (17, 'Luna Verde', 'Pop', 'Mexico', 2021),
    (18, 'The Brass Parade', 'Jazz', 'England', 2007),
    (19, 'Saffron Skies', 'World', 'India', 2016),
    (20, 'Neon Cathedral', 'Electronic', 'Belgium', 2014),
    (21, 'Old Maple Band', 'Folk', 'Canada', 1998),
    (22, 'Crimson Relay', 'Rock', 'Australia', 2012);

-- 30 sets over Friday to Sunday; artists 21 and 22 are booked but have no set yet.
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30)
INSERT INTO performances (performance_id, artist_id, stage_id, day, start_time, duration_minutes)
SELECT
    i,
    ((i * 7) % 20) + 1,
    CASE WHEN i % 6 = 0 THEN 5 ELSE ((i * 3) % 4) + 1 END,
    CASE (i - 1) / 10 WHEN 0 THEN 'Friday' WHEN 1 THEN 'Saturday' ELSE 'Sunday' END,
    printf('%02d:%02d', 14 + ((i - 1) % 10), CASE WHEN i % 2 = 0 THEN 30 ELSE 0 END),
    CASE WHEN i % 10 = 0 THEN 90 WHEN i % 3 = 0 THEN 75 ELSE 60 END
FROM n;

-- 300 tickets sold between January and June 2024.
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300)
INSERT INTO tickets (ticket_id, ticket_type, price, buyer_country, purchase_date)
SELECT
    i,
    CASE WHEN i % 10 = 0 THEN 'VIP' WHEN i % 3 = 0 THEN 'Weekend' ELSE 'Day' END,
    CASE WHEN i % 10 = 0 THEN 320.0 WHEN i % 3 = 0 THEN 189.5 ELSE 79.0 END
        - CASE WHEN (i * 13) % 181 < 60 THEN 10.0 ELSE 0.0 END,
    CASE (i * 7) % 9
        WHEN 0 THEN 'Germany' WHEN 1 THEN 'England' WHEN 2 THEN 'Netherlands'
        WHEN 3 THEN 'Germany' WHEN 4 THEN 'France' WHEN 5 THEN 'England'
        WHEN 6 THEN 'Belgium' WHEN 7 THEN 'Germany' ELSE 'Denmark' END,
    date('2024-01-01', '+' || ((i * 53) % 182) || ' days')
FROM n;
